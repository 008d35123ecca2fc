//! End-to-end tests against real PostgreSQL and S3, one module per area.

mod auth;
mod backends;
mod chaos;
mod checkpoint;
mod crash;
mod faults;
mod fencing;
mod gaps;
mod harness;
mod identity;
mod idle;
mod landing;
mod languages;
mod large;
mod load;
mod messages;
mod metrics;
mod plugins;
mod postgres16;
mod restart;
mod schema;
mod start;
mod streaming;
mod two_phase;
mod types;
mod verify;
