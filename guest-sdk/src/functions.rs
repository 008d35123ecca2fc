//! The host's column functions, `tributary:functions/columns@1.0.0`
//! (`wit/deps/functions/columns.wit`), for a Rust plugin that wants them: with the `functions`
//! feature, [`apply`] runs steps (digests, regex replace, case, truncation, JSON paths) over the
//! columns of an Arrow IPC stream at the host, and returns the columns they make as a stream.
//!
//! A compiled Rust plugin gains little speed from them (it computes as fast as the host); they
//! are here so that a Rust plugin can share a pipeline's exact semantics with plugins in other
//! languages. A plugin that calls [`apply`] imports the interface, and a host that does not
//! serve it refuses the plugin when it loads; one that never calls it imports nothing.

mod generated {
    wit_bindgen::generate!({
        path: "wit",
        inline: "
            package tributary:guest-functions;
            world functions {
                import tributary:functions/columns@1.0.0;
            }
        ",
        world: "tributary:guest-functions/functions",
        generate_all,
    });
}

pub use generated::tributary::functions::columns::*;
