//! Guest SDK. (Being written.)
