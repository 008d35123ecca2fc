//! Test plugin: tries what the sandbox must deny (reading a file, listing a directory, reading
//! the environment and the arguments, opening a TCP connection, resolving a name) and lands
//! one row per attempt in the declared output `attempts`: what it tried and what happened
//! (`denied: <error>` or `allowed: <what it got>`).

use std::io::Read;

use tributary_guest::*;

const OUTPUT: &str = "attempts";

struct Sandbox;

fn outcome<T: std::fmt::Debug, E: std::fmt::Display>(result: Result<T, E>) -> String {
    match result {
        Ok(value) => format!("allowed: {value:?}"),
        Err(error) => format!("denied: {error}"),
    }
}

fn attempts() -> Vec<(&'static str, String)> {
    let read_file = std::fs::File::open("/etc/hostname").and_then(|mut f| {
        let mut text = String::new();
        f.read_to_string(&mut text).map(|_| text)
    });
    let list_dir = std::fs::read_dir(".").map(|entries| entries.count());
    let environment: Vec<(String, String)> = std::env::vars().collect();
    let arguments: Vec<String> = std::env::args().collect();
    let connect = std::net::TcpStream::connect("127.0.0.1:5432");
    let resolve =
        std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 80)).map(|addrs| addrs.count());
    vec![
        ("read /etc/hostname", outcome(read_file)),
        ("list the working directory", outcome(list_dir)),
        (
            "read the environment",
            match environment.is_empty() {
                true => "denied: empty".to_owned(),
                false => format!("allowed: {environment:?}"),
            },
        ),
        (
            "read the arguments",
            match arguments.is_empty() {
                true => "denied: empty".to_owned(),
                false => format!("allowed: {arguments:?}"),
            },
        ),
        ("connect to 127.0.0.1:5432", outcome(connect)),
        ("resolve localhost", outcome(resolve)),
    ]
}

impl Transform for Sandbox {
    fn describe() -> PluginInfo {
        PluginInfo::new("sandbox", env!("CARGO_PKG_VERSION"))
    }

    fn init(config: Vec<(String, String)>) -> Result<Setup, String> {
        no_settings(&config)?;
        let columns = vec![
            OutputColumn::new("attempt", ScalarType::Text).not_null(),
            OutputColumn::new("outcome", ScalarType::Text).not_null(),
        ];
        Ok(Setup::new()
            .reads_columns(&[])
            .without_old_images()
            .output(OUTPUT, columns))
    }

    fn process(batch: Batch) -> Result<Processed, Error> {
        let mut emits: Vec<Emit> = batch.changes().map(|c| c.keep()).collect();
        if let Some(first) = batch.changes().next() {
            for (sub, (attempt, outcome)) in attempts().into_iter().enumerate() {
                emits.push(first.to_declared(
                    OUTPUT,
                    sub as u32,
                    vec![Value::Text(attempt.to_owned()), Value::Text(outcome)],
                ));
            }
        }
        Ok(emits.into())
    }
}

export_transform!(Sandbox);
