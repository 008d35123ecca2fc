//! Test harness: a real PostgreSQL cluster and a real S3 server for the integration tests.
//!
//! Everything here is real and local, started on demand, once per test process:
//!
//! - [`postgres`] is a throwaway cluster with `wal_level = logical` on a private port; each
//!   test takes its own database from [`fresh_database`] (and its own slot in it), so tests run
//!   in parallel without seeing each other.
//! - [`azurite`] is Azurite, Microsoft's Azure Storage emulator, for `az://` sinks: the Blob
//!   API with shared keys checked and conditional puts decided; containers of its own per test.
//! - [`gcs`] is fake-gcs-server, a Google Cloud Storage emulator, for `gs://` sinks: the
//!   JSON API with conditional creates decided; buckets of its own per test.
//! - [`s3`] is the tests' own S3 server (`tests/s3-server`, on `s3s-fs`): objects on disk,
//!   signatures checked, conditional puts decided atomically. [`S3Server::start`] gives a test a private one it may stop and restart.
//!   Tests pass [`S3Server::object_store_options`] to `object_store` and never set process
//!   environment variables, because tests share the process.
//! - [`catalog`] starts an Iceberg REST catalog server (`tests/catalogs/iceberg_rest.py`,
//!   pyiceberg's catalog behind the REST routes) and reads tables back through pyiceberg.
//! - [`plugin`] finds a transform built for `wasm32-wasip2`.
//! - [`pipeline`] runs a pipeline inside a test, [`service`] runs `tributary run` as a child
//!   process; [`lake`] reads back what they landed.
//! - [`proxy`] stands between a client and a server and misbehaves on demand; [`chaos`] holds
//!   the seeded generator, the confirmed-position watch and the lake-equals-source check of the
//!   chaos test.
//! - [`container`] builds the Dockerfile's image from the binary the suite built and runs it
//!   with podman; [`manifests`] reads and checks the deployment files with their own tools.
//!
//! Statics are never dropped, so the shared servers are stopped by an `atexit` hook: the test
//! harness leaves through `std::process::exit`, which runs it.
//!
//! Missing prerequisites fail loudly with the command that installs them; `scripts/test.sh`
//! installs all of them.

mod azurite;
pub mod catalog;
pub mod chaos;
pub mod container;
mod gcs;
pub mod lake;
pub mod manifests;
pub mod pipeline;
mod plugins;
mod postgres;
pub mod proxy;
mod s3;
pub mod service;
pub mod tls;

pub use azurite::{Azurite, azurite};
pub use gcs::{FakeGcs, fake_gcs};
pub use plugins::{PLUGIN_BUILD_COMMAND, guest_plugin, plugin, plugin_dir};
pub use postgres::{
    AUTH_METHODS, TESTED_MAJORS, TestDatabase, cluster_of, connect, database_on, fresh_database,
    postgres, postgres_bin, unique_name,
};
pub use s3::{BUILD_COMMAND as S3_SERVER_BUILD_COMMAND, S3Server, s3};
pub use tributary_cluster::TempCluster;
