//! Test harness: a real PostgreSQL cluster and a real S3 server for the integration tests.
