//! The replication connection authenticates the ways PostgreSQL asks it to, and names what
//! went wrong when it cannot.

use tributary::source::replication::ReplicationConnection;
use tributary_tests::{AUTH_METHODS, fresh_database, postgres};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_connects_with_password_md5_and_scram() {
    let db = fresh_database("auth").await;
    let port = postgres().port();
    for (role, method) in AUTH_METHODS {
        let encryption = if method == "md5" {
            "md5"
        } else {
            "scram-sha-256"
        };
        db.client
            .batch_execute(&format!(
                "SET password_encryption = '{encryption}';
                 DROP ROLE IF EXISTS {role};
                 CREATE ROLE {role} LOGIN REPLICATION PASSWORD 'secret {role}';"
            ))
            .await
            .unwrap();
        let url = format!(
            "postgres://{role}:secret%20{role}@127.0.0.1:{port}/{}",
            db.name
        );
        let config: tributary::source::connect::PgConfig = url.parse().unwrap();
        let mut conn = ReplicationConnection::connect(&config)
            .await
            .unwrap_or_else(|e| panic!("{method} authentication as {role}: {e}"));
        let system = conn.identify_system().await.unwrap();
        assert_eq!(system.dbname.as_deref(), Some(db.name.as_str()), "{method}");
        assert!(system.xlog_pos.0 > 0, "{method}");

        let wrong = format!("postgres://{role}:nope@127.0.0.1:{port}/{}", db.name);
        let err = ReplicationConnection::connect(&wrong.parse().unwrap())
            .await
            .err()
            .unwrap_or_else(|| panic!("{method} accepted a wrong password"))
            .to_string();
        assert!(
            err.contains(role) && err.contains("28P01"),
            "{method}: {err}"
        );
    }
}
