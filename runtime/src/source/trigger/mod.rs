//! Capture through triggers, for a source that cannot serve a slot (docs/design.md, Capture
//! without a slot): what is installed ([`sql`], without IO), installing and removing it
//! ([`install`]), and journal rows as the pgoutput frames a slot would send ([`journal`],
//! without IO), which the read machine takes as it takes a slot's, read in ticks ([`poll`];
//! [`ticks`] says which landed, without IO) by [`capture`], which deletes what landed; and which
//! transactions a snapshot sees ([`visible`], without IO), for `verify`; and which lake a
//! journal captures for ([`owner`], without IO), so that a start never reads on from a journal
//! that missed changes.

pub mod capture;
pub mod install;
pub mod journal;
pub mod owner;
pub mod poll;
pub mod sql;
pub mod ticks;
pub mod visible;

use crate::source::provision::ProvisionError;

/// A failed query of `what`, with the server's words.
fn query(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> ProvisionError {
    let what = what.into();
    move |error| ProvisionError::Query { what, error }
}
