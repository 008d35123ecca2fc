//! Locating the transforms built for `wasm32-wasip2`.

use std::path::{Path, PathBuf};

/// The command that builds every plugin the tests load.
pub const PLUGIN_BUILD_COMMAND: &str = "cargo build --release --target wasm32-wasip2 -p passthrough -p trap -p spin -p mask -p messages -p select -p sandbox -p old-contract -p newer-functions";

/// The built component `<name>.wasm`; panics with the build command when it is missing.
pub fn plugin(name: &str) -> PathBuf {
    let dir = plugin_dir();
    let path = dir.join(format!("{name}.wasm"));
    if !path.is_file() {
        panic!(
            "plugin {name:?} is not built ({} does not exist); build the plugins with `{PLUGIN_BUILD_COMMAND}` \
             (or run scripts/test.sh), or set TRIBUTARY_PLUGIN_DIR to the directory holding them",
            path.display()
        );
    }
    path
}

/// The example plugin `name` of `lang` (`python`, `js`, `c`), built by that language's own
/// toolchain from `examples/plugins/<lang>/` into `TRIBUTARY_GUEST_PLUGIN_DIR/<lang>/` (or
/// `<target>/guest/<lang>/`); panics saying how to build them when it is missing.
pub fn guest_plugin(lang: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os("TRIBUTARY_GUEST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("guest"));
    let path = dir.join(lang).join(format!("{name}.wasm"));
    if !path.is_file() {
        panic!(
            "the {lang} example plugin {name:?} is not built ({} does not exist); run \
             scripts/test.sh, which installs the {lang} toolchain and builds the examples, or set \
             TRIBUTARY_GUEST_PLUGIN_DIR to the directory holding <lang>/<name>.wasm",
            path.display()
        );
    }
    path
}

/// Where built plugins live: `TRIBUTARY_PLUGIN_DIR`, else `<target>/wasm32-wasip2/release`.
pub fn plugin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TRIBUTARY_PLUGIN_DIR") {
        return PathBuf::from(dir);
    }
    target_dir().join("wasm32-wasip2").join("release")
}

/// The cargo target directory: `CARGO_TARGET_DIR` when set, else the one this test binary was
/// built into (a target dir configured elsewhere is found that way), else `<workspace>/target`.
pub(crate) fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(target_dir_of)
    {
        return dir;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .join("target")
}

/// The target directory holding an executable built by cargo, which marks it with
/// `CACHEDIR.TAG`.
fn target_dir_of(exe: &Path) -> Option<PathBuf> {
    exe.ancestors()
        .skip(1)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_lives_in_a_target_dir() {
        let exe = std::env::current_exe().unwrap();
        let dir = target_dir_of(&exe).expect("test binaries are built under a target dir");
        assert!(exe.starts_with(&dir));
        assert!(dir.join("CACHEDIR.TAG").is_file());
    }
}
