//! Passthrough plugin. (Being written.)
