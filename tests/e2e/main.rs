//! End-to-end tests against real PostgreSQL and S3.
mod harness;
