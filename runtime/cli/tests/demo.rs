//! `tributary demo` runs the whole pipeline on its own throwaway parts.

use std::process::Command;

use tributary_tests::lake::read_output;
use tributary_tests::{plugin, unique_name};

const BIN: &str = env!("CARGO_BIN_EXE_tributary");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_lands_its_workload() {
    let dir = std::env::temp_dir().join(unique_name("demo-lake"));
    let out = Command::new(BIN)
        .args(["demo", "--orders", "400", "--sink-dir"])
        .arg(&dir)
        .arg("--plugin")
        .arg(plugin("passthrough"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("public.orders"), "{stdout}");

    let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).unwrap();
    let customers = read_output(&store, "public.customers").await;
    let orders = read_output(&store, "public.orders").await;
    // 400 orders: 20 customers, 400 inserts, 40 shipped, 10 cancelled.
    assert_eq!(customers.len(), 20);
    let count = |op: &str| orders.iter().filter(|r| r.op == op).count();
    assert_eq!(
        (count("insert"), count("update"), count("delete")),
        (400, 40, 10)
    );
    let shipped = orders
        .iter()
        .filter(|r| r.values["status"].as_deref() == Some("shipped"));
    assert_eq!(shipped.count(), 40);
    std::fs::remove_dir_all(&dir).unwrap();
}
