//! Decoding of pgoutput message bytes. (Being written.)

use std::collections::HashMap;
use std::sync::Arc;

use super::{LogicalMessage, Relation};

/// A pgoutput message that cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty pgoutput message")]
    Empty,
}

/// Stateful decoder: keeps the relation cache and whether a streamed chunk is open.
#[derive(Debug, Default)]
pub struct Decoder {
    relations: HashMap<u32, Arc<Relation>>,
}

impl Decoder {
    /// A decoder for the negotiated `proto_version` (1 to 4).
    pub fn new(_proto_version: u32) -> Self {
        Decoder::default()
    }

    pub fn decode(&mut self, _data: &[u8]) -> Result<LogicalMessage, DecodeError> {
        Err(DecodeError::Empty)
    }

    pub fn relation(&self, id: u32) -> Option<&Arc<Relation>> {
        self.relations.get(&id)
    }
}
