//! The container image, built with podman from the `tributary` binary the suite already built,
//! so that the image tests take seconds and never compile Rust inside a container.
//!
//! Public base images cannot be pulled where the tests run, so both of the Dockerfile's
//! inputs are stood in for:
//! - its `RUNTIME_IMAGE` (a distroless base: glibc, CA certificates, the user 65532) by a
//!   root filesystem made here from the binary's own shared libraries (`ldd`), the host's CA
//!   bundle and a passwd entry; and
//! - its `build` stage by a `FROM scratch` stage holding what that stage leaves in `/out`: the
//!   binary (without its debug sections, as the real stage strips it), the bundled plugins
//!   the suite built, busybox (the health check's wget) and the empty cache directory.
//!
//! The runtime stage itself is the Dockerfile's own text, so what the tests run is what the
//! Dockerfile says: its user, paths, volume, entrypoint and health check.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// How to install what the image tests need (Debian or Ubuntu, as root).
pub const INSTALL_COMMAND: &str = "apt-get install podman runc busybox-static";

/// The bundled plugins, as the Dockerfile's `PLUGINS` names them.
pub const BUNDLED_PLUGINS: [&str; 7] = [
    "passthrough",
    "mask",
    "select",
    "filter",
    "router",
    "flatten",
    "messages",
];

/// podman, with the flags this host needs to start a container.
#[derive(Debug, Clone)]
pub struct Engine {
    podman: PathBuf,
    /// runc when it is installed: crun, podman's default, refuses every container on a host
    /// whose cgroup v1 controllers sit beside a cgroup v2 mount ("hybrid" mode).
    runtime: Option<PathBuf>,
}

impl Engine {
    /// podman from `PATH` (or `TRIBUTARY_PODMAN`); panics with the install command when it is
    /// missing, as for every other tool the suite needs.
    pub fn find() -> Engine {
        let podman = std::env::var_os("TRIBUTARY_PODMAN")
            .map(PathBuf::from)
            .or_else(|| which("podman"))
            .unwrap_or_else(|| {
                panic!(
                    "podman not found: the image tests build and run the image with it; install it ({INSTALL_COMMAND}) or run scripts/test.sh, which does"
                )
            });
        Engine {
            podman,
            runtime: which("runc"),
        }
    }

    /// `podman` with the global flags.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.podman);
        if let Some(runtime) = &self.runtime {
            command.arg("--runtime").arg(runtime);
        }
        command.stdin(Stdio::null());
        command
    }

    /// `podman run --rm` with the flags every container here needs: limits no higher than the
    /// test process's own, since raising one takes a capability the tests may not have
    /// (podman's defaults ask for more open files and processes than many hosts allow).
    pub fn run(&self) -> Command {
        let mut command = self.command();
        command.args(["run", "--rm"]);
        for (name, resource, cap) in [
            ("nofile", libc::RLIMIT_NOFILE, 65_536),
            ("nproc", libc::RLIMIT_NPROC, 4_096),
        ] {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes into the struct it is given.
            let ok = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
            let value = if ok { limit.rlim_cur.min(cap) } else { 1_024 };
            command
                .arg("--ulimit")
                .arg(format!("{name}={value}:{value}"));
        }
        command
    }

    /// Runs a podman command to the end; its output.
    pub fn output(&self, command: &mut Command) -> Output {
        command
            .output()
            .unwrap_or_else(|error| panic!("could not run {}: {error}", self.podman.display()))
    }
}

/// An image the tests built; removed when dropped.
#[derive(Debug)]
pub struct Image {
    pub tag: String,
    engine: Engine,
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = self
            .engine
            .command()
            .args(["rmi", "--force", &self.tag])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// What `podman build` said when it failed.
fn built(engine: &Engine, command: &mut Command, tag: &str) -> Result<Image, String> {
    let output = engine.output(command);
    if output.status.success() {
        Ok(Image {
            tag: tag.to_owned(),
            engine: engine.clone(),
        })
    } else {
        Err(format!(
            "podman build of {tag} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The stand-in for the Dockerfile's runtime base: the shared libraries `binary` loads (the
/// paths `ldd` prints, the dynamic loader included), the CA bundle, `/tmp`, and the user and
/// group 65532 (distroless's `nonroot`).
pub fn base_image(engine: &Engine, binary: &Path, work: &Path) -> Result<Image, String> {
    let context = work.join("base");
    let root = context.join("root");
    std::fs::create_dir_all(root.join("etc")).map_err(|e| e.to_string())?;
    let ldd = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|error| format!("could not run ldd: {error}"))?;
    if !ldd.status.success() {
        return Err(format!(
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&ldd.stderr)
        ));
    }
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = line
            .split("=>")
            .last()
            .and_then(|rest| rest.split_whitespace().next())
            .filter(|path| path.starts_with('/'));
        if let Some(path) = path {
            copy_into(&root, Path::new(path))?;
        }
    }
    let ca = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if ca.exists() {
        copy_into(&root, ca)?;
    }
    // World-writable and sticky, as distroless has it: large transactions wait there
    // (flush.spill_dir), and `tributary check` makes sure a file can be written.
    std::fs::create_dir_all(root.join("tmp")).map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .map_err(|e| e.to_string())?;
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n")
        .map_err(|e| e.to_string())?;
    std::fs::write(
        context.join("Containerfile"),
        "FROM scratch\nCOPY root/ /\n",
    )
    .map_err(|e| e.to_string())?;
    let tag = format!("localhost/tributary-test-base:{}", std::process::id());
    built(
        engine,
        engine
            .command()
            .args([
                "build",
                "--quiet",
                "--layers=false",
                "--tag",
                &tag,
                "--file",
            ])
            .arg(context.join("Containerfile"))
            .arg(&context),
        &tag,
    )
}

/// Whether this host can start a container at all: the base image's dynamic loader prints its
/// version. `Err` carries podman's own words. Only this failure lets an image test skip; any
/// failure after it is the image's.
pub fn probe(engine: &Engine, base: &Image) -> Result<(), String> {
    let output = engine.output(engine.run().args([
        "--network",
        "none",
        "--entrypoint",
        "/lib64/ld-linux-x86-64.so.2",
        &base.tag,
        "--version",
    ]));
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "podman cannot start a container here ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The image of the Dockerfile's runtime stage on `base`, holding `binary` and the plugins in
/// `plugins` (named `<name>.wasm`), built in docker format so that its HEALTHCHECK is kept.
pub fn tributary_image(
    engine: &Engine,
    dockerfile: &Path,
    base: &Image,
    binary: &Path,
    plugins: &Path,
    work: &Path,
) -> Result<Image, String> {
    let context = work.join("image");
    let out = context.join("out");
    std::fs::create_dir_all(out.join("plugins")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(out.join("cache/tributary/plugins")).map_err(|e| e.to_string())?;
    // As the build stage does: the debug build's 700 MB are mostly debug sections.
    let strip = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(binary)
        .arg(out.join("tributary"))
        .output()
        .map_err(|error| format!("could not run objcopy (binutils): {error}"))?;
    if !strip.status.success() {
        return Err(format!(
            "objcopy --strip-debug {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&strip.stderr)
        ));
    }
    for plugin in BUNDLED_PLUGINS {
        let file = plugins.join(format!("{plugin}.wasm"));
        std::fs::copy(&file, out.join("plugins").join(format!("{plugin}.wasm")))
            .map_err(|error| format!("bundled plugin {}: {error}", file.display()))?;
    }
    let busybox = which("busybox").ok_or_else(|| {
        format!("busybox not found: the image's health check is its wget; install it ({INSTALL_COMMAND})")
    })?;
    std::fs::copy(&busybox, out.join("wget")).map_err(|e| e.to_string())?;

    let text = std::fs::read_to_string(dockerfile)
        .map_err(|error| format!("cannot read {}: {error}", dockerfile.display()))?;
    let containerfile = runtime_stage_on_prebuilt(&text)?;
    std::fs::write(context.join("Containerfile"), containerfile).map_err(|e| e.to_string())?;
    let tag = format!("localhost/tributary-test:{}", std::process::id());
    built(
        engine,
        engine
            .command()
            // Without layers the stand-in build stage leaves no untagged image behind.
            .args([
                "build",
                "--quiet",
                "--layers=false",
                "--format",
                "docker",
                "--tag",
                &tag,
            ])
            .arg("--build-arg")
            .arg(format!("RUNTIME_IMAGE={}", base.tag))
            .arg("--file")
            .arg(context.join("Containerfile"))
            .arg(&context),
        &tag,
    )
}

/// The Dockerfile with its `build` stage replaced by one that copies a prebuilt `out/`: the
/// global `ARG`s, then that stage, then the runtime stage word for word.
pub fn runtime_stage_on_prebuilt(dockerfile: &str) -> Result<String, String> {
    let lines: Vec<&str> = dockerfile.lines().collect();
    let is_from = |line: &str| line.trim_start().to_ascii_uppercase().starts_with("FROM ");
    let first_from = lines
        .iter()
        .position(|l| is_from(l))
        .ok_or("the Dockerfile has no FROM")?;
    let runtime = lines
        .iter()
        .position(|l| is_from(l) && l.to_ascii_lowercase().trim_end().ends_with(" as runtime"))
        .ok_or("the Dockerfile has no stage named runtime (`FROM ... AS runtime`)")?;
    let globals: Vec<&str> = lines[..first_from]
        .iter()
        .copied()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("ARG "))
        .collect();
    Ok(format!(
        "{}\nFROM scratch AS build\nCOPY out/ /out/\n\n{}\n",
        globals.join("\n"),
        lines[runtime..].join("\n")
    ))
}

fn copy_into(root: &Path, file: &Path) -> Result<(), String> {
    let target = root.join(file.strip_prefix("/").unwrap_or(file));
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    std::fs::copy(file, &target)
        .map(drop)
        .map_err(|error| format!("cannot copy {}: {error}", file.display()))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}
