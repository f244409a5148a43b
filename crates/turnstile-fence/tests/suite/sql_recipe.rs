//! The SQL fencing recipe (`sql/recipe.sql`, copied verbatim into `docs/fencing.md`) run
//! against a real PostgreSQL server: each test starts a throwaway cluster (initdb into a
//! temporary directory, postgres on a free loopback port) and stops and removes it on drop.
//!
//! Needs the PostgreSQL server binaries (`apt-get install postgresql` on Debian); without them
//! the tests fail, they never skip. `TURNSTILE_PG_BIN_DIR` overrides where they are looked for.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use postgres::{Client, NoTls};

/// The recipe: the one copy of the SQL, shared with the docs.
const RECIPE: &str = include_str!("../../sql/recipe.sql");
/// The user documentation that must quote the recipe verbatim.
const FENCING_DOC: &str = include_str!("../../../../docs/fencing.md");

const CLUSTER: &str = "0d6059aa93a2cc6666012c9e9b367b87";
const FOREIGN_CLUSTER: &str = "9f1c0000000000000000000000000000";
/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECONDS: u32 = 60;
/// Start attempts, each on a fresh port (another process may take the port we picked).
const START_ATTEMPTS_MAX: u32 = 3;

/// One named statement of the recipe (`-- name: NAME` up to the next marker).
fn sql(name: &str) -> String {
    let marker = format!("-- name: {name}\n");
    let start = RECIPE
        .find(&marker)
        .unwrap_or_else(|| panic!("recipe.sql has no statement named {name}"))
        + marker.len();
    let rest = &RECIPE[start..];
    let end = rest.find("-- name: ").unwrap_or(rest.len());
    rest[..end].trim().to_owned()
}

#[test]
fn docs_quote_the_recipe_verbatim() {
    assert!(
        FENCING_DOC.contains(RECIPE.trim()),
        "docs/fencing.md must contain crates/turnstile-fence/sql/recipe.sql verbatim"
    );
}

#[test]
fn newer_token_update_applies() {
    let pg = PgServer::start();
    let mut db = pg.connect_with_schema();
    create(&mut db, "acct", CLUSTER);
    assert_eq!(write(&mut db, "acct", CLUSTER, 5, 50), 1);
    assert_eq!(write(&mut db, "acct", CLUSTER, 7, 70), 1, "newer token");
    assert_eq!(
        write(&mut db, "acct", CLUSTER, 7, 71),
        1,
        "same grant writing again"
    );
    assert_eq!(row(&mut db, "acct"), (71, 7));
    assert_eq!(add(&mut db, "acct", CLUSTER, 8, 4), Some(75));
    assert_eq!(row(&mut db, "acct"), (75, 8));
}

#[test]
fn stale_token_update_affects_no_row() {
    let pg = PgServer::start();
    let mut db = pg.connect_with_schema();
    create(&mut db, "acct", CLUSTER);
    assert_eq!(write(&mut db, "acct", CLUSTER, 7, 70), 1);
    assert_eq!(write(&mut db, "acct", CLUSTER, 6, 60), 0, "stale write");
    assert_eq!(add(&mut db, "acct", CLUSTER, 6, 1), None, "stale add");
    assert_eq!(read(&mut db, "acct", CLUSTER, 6), None, "stale read");
    assert_eq!(row(&mut db, "acct"), (70, 7));
    let diagnosis = db
        .query_one(sql("diagnose").as_str(), &[&"acct"])
        .expect("diagnose");
    assert_eq!(diagnosis.get::<_, i64>(1), 7);
}

#[test]
fn token_from_another_cluster_affects_no_row() {
    let pg = PgServer::start();
    let mut db = pg.connect_with_schema();
    create(&mut db, "acct", CLUSTER);
    assert_eq!(write(&mut db, "acct", CLUSTER, 5, 50), 1);
    // A larger token, but from a different cluster: its indexes mean nothing here.
    assert_eq!(write(&mut db, "acct", FOREIGN_CLUSTER, 1_000, 1), 0);
    assert_eq!(add(&mut db, "acct", FOREIGN_CLUSTER, 1_000, 1), None);
    assert_eq!(read(&mut db, "acct", FOREIGN_CLUSTER, 1_000), None);
    // Creating the row again under the other cluster does not re-pin it.
    create(&mut db, "acct", FOREIGN_CLUSTER);
    assert_eq!(write(&mut db, "acct", FOREIGN_CLUSTER, 1_000, 1), 0);
    assert_eq!(row(&mut db, "acct"), (50, 5));
}

#[test]
fn read_modify_write_loses_no_update_when_an_old_holder_resumes() {
    let pg = PgServer::start();
    let mut db = pg.connect_with_schema();
    create(&mut db, "acct", CLUSTER);
    assert_eq!(write(&mut db, "acct", CLUSTER, 9, 100), 1);
    // A (token 10) reads and pauses; its lease expires; B (token 11) reads, adds 1, writes.
    let a_read = read(&mut db, "acct", CLUSTER, 10).expect("A's read");
    let b_read = read(&mut db, "acct", CLUSTER, 11).expect("B's read");
    assert_eq!((a_read, b_read), (100, 100));
    assert_eq!(
        write(&mut db, "acct", CLUSTER, 11, b_read + 1),
        1,
        "B's write"
    );
    // A resumes and writes its stale read + 1: refused, in both forms.
    assert_eq!(
        write(&mut db, "acct", CLUSTER, 10, a_read + 1),
        0,
        "A's write"
    );
    assert_eq!(add(&mut db, "acct", CLUSTER, 10, 1), None, "A's add");
    assert_eq!(row(&mut db, "acct"), (101, 11));
    // A re-acquires (token 12) and retries: both increments are in.
    let seen = read(&mut db, "acct", CLUSTER, 12).expect("A's new read");
    assert_eq!(write(&mut db, "acct", CLUSTER, 12, seen + 1), 1);
    assert_eq!(row(&mut db, "acct"), (102, 12));

    // The control: B's read alone (no write yet) already refuses A. Without the token bump on
    // read, A's write would land and B's later write would overwrite it.
    create(&mut db, "ctl", CLUSTER);
    let a_read = read(&mut db, "ctl", CLUSTER, 20).expect("A's read");
    let b_read = read(&mut db, "ctl", CLUSTER, 21).expect("B's read");
    assert_eq!(write(&mut db, "ctl", CLUSTER, 20, a_read + 1), 0);
    assert_eq!(write(&mut db, "ctl", CLUSTER, 21, b_read + 1), 1);
    assert_eq!(row(&mut db, "ctl"), (1, 21));
}

/// Holders with overlapping grants (each attempt a new, larger token, as the lock service
/// hands out) do read-modify-writes on separate connections; every acknowledged increment
/// must be in the final balance.
#[test]
fn concurrent_holders_lose_no_acknowledged_increment() {
    const THREADS: usize = 4;
    const ATTEMPTS_PER_THREAD: usize = 40;
    let pg = PgServer::start();
    let mut db = pg.connect_with_schema();
    create(&mut db, "acct", CLUSTER);
    let next_token = Arc::new(AtomicU64::new(1));
    let acknowledged = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let (next_token, acknowledged) = (Arc::clone(&next_token), Arc::clone(&acknowledged));
            let mut db = pg.connect();
            scope.spawn(move || {
                for _ in 0..ATTEMPTS_PER_THREAD {
                    let token = next_token.fetch_add(1, Ordering::Relaxed);
                    let Some(seen) = read(&mut db, "acct", CLUSTER, token) else {
                        continue;
                    };
                    if write(&mut db, "acct", CLUSTER, token, seen + 1) == 1 {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let acknowledged = acknowledged.load(Ordering::Relaxed);
    let (balance, _) = row(&mut db, "acct");
    println!(
        "{acknowledged} of {} increments acknowledged",
        THREADS * ATTEMPTS_PER_THREAD
    );
    assert!(acknowledged > 0);
    assert_eq!(balance, i64::try_from(acknowledged).expect("small count"));
}

// ---- the recipe's statements, typed ----

fn create(db: &mut Client, id: &str, cluster: &str) {
    db.execute(sql("create").as_str(), &[&id, &cluster])
        .expect("create");
}

/// `fenced_write`: rows affected.
fn write(db: &mut Client, id: &str, cluster: &str, token: u64, value: i64) -> u64 {
    let token = i64::try_from(token).expect("token fits bigint");
    db.execute(
        sql("fenced_write").as_str(),
        &[&id, &cluster, &token, &value],
    )
    .expect("fenced_write")
}

/// `fenced_add`: the new balance, or `None` when refused.
fn add(db: &mut Client, id: &str, cluster: &str, token: u64, amount: i64) -> Option<i64> {
    let token = i64::try_from(token).expect("token fits bigint");
    let rows = db
        .query(
            sql("fenced_add").as_str(),
            &[&id, &cluster, &token, &amount],
        )
        .expect("fenced_add");
    rows.first().map(|r| r.get(0))
}

/// `fenced_read`: the balance, or `None` when refused.
fn read(db: &mut Client, id: &str, cluster: &str, token: u64) -> Option<i64> {
    let token = i64::try_from(token).expect("token fits bigint");
    let rows = db
        .query(sql("fenced_read").as_str(), &[&id, &cluster, &token])
        .expect("fenced_read");
    rows.first().map(|r| r.get(0))
}

/// `(balance, fence_token)` of a row, read directly.
fn row(db: &mut Client, id: &str) -> (i64, i64) {
    let r = db
        .query_one(
            "SELECT balance, fence_token FROM accounts WHERE id = $1",
            &[&id],
        )
        .expect("row exists");
    (r.get(0), r.get(1))
}

// ---- a throwaway PostgreSQL server ----

/// A PostgreSQL cluster in a temporary directory, serving on a loopback port. Dropping it
/// stops the server (immediate mode) and removes the directory, also when a test panics.
struct PgServer {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    port: u16,
    /// Run the server binaries as the `postgres` user (they refuse to run as root).
    as_postgres: bool,
    /// Declared last: removed after `drop` has stopped the server.
    dir: tempfile::TempDir,
}

impl PgServer {
    fn start() -> PgServer {
        let bin_dir = find_bin_dir();
        let as_postgres = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("turnstile-pg-")
            .tempdir()
            .expect("temporary directory");
        if as_postgres {
            chown_to_postgres(dir.path());
        }
        let mut pg = PgServer {
            bin_dir,
            data_dir: dir.path().join("data"),
            port: 0,
            as_postgres,
            dir,
        };
        pg.initdb();
        for attempt in 1..=START_ATTEMPTS_MAX {
            pg.port = free_port();
            if pg.pg_ctl_start() {
                return pg;
            }
            eprintln!(
                "postgres did not start on port {} (attempt {attempt})",
                pg.port
            );
        }
        let log = fs::read_to_string(pg.log_path()).unwrap_or_default();
        panic!("postgres did not start after {START_ATTEMPTS_MAX} attempts; server log:\n{log}");
    }

    fn connect(&self) -> Client {
        let params = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=10",
            self.port
        );
        Client::connect(&params, NoTls).expect("connect to the test postgres")
    }

    fn connect_with_schema(&self) -> Client {
        let mut db = self.connect();
        db.batch_execute(&sql("schema")).expect("schema");
        db
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn initdb(&self) {
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--no-instructions", "--locale=C"])
            .output()
            .expect("run initdb");
        assert_success("initdb", &out);
    }

    /// `pg_ctl start -w`: true once the server accepts connections.
    fn pg_ctl_start(&self) -> bool {
        // fsync off: the cluster is thrown away, and the recipe's semantics do not depend on
        // durability. The socket goes into our directory, not the system's.
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c full_page_writes=off",
            self.port,
            self.dir.path().display()
        );
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", &PG_CTL_WAIT_SECONDS.to_string(), "-o", &options])
            .arg("start")
            .output()
            .expect("run pg_ctl start");
        out.status.success()
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin_dir.join(program);
        if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if !self.data_dir.join("postmaster.pid").exists() {
            return;
        }
        let stopped = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data_dir)
            .args([
                "-m",
                "immediate",
                "-w",
                "-t",
                &PG_CTL_WAIT_SECONDS.to_string(),
            ])
            .arg("stop")
            .output();
        match stopped {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "pg_ctl stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("pg_ctl stop could not run: {e}"),
        }
    }
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: `TURNSTILE_PG_BIN_DIR`, or the
/// newest `/usr/lib/postgresql/<major>/bin` (Debian's layout). Fails the test when absent.
fn find_bin_dir() -> PathBuf {
    let has_server = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    if let Some(dir) = std::env::var_os("TURNSTILE_PG_BIN_DIR").map(PathBuf::from) {
        assert!(
            has_server(&dir),
            "TURNSTILE_PG_BIN_DIR={} lacks initdb, pg_ctl or postgres",
            dir.display()
        );
        return dir;
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_server(&bin).then_some((major, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, dir)) => dir,
        None => panic!(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found under \
             /usr/lib/postgresql/*/bin: run `apt-get install -y postgresql` (CI installs it), \
             or set TURNSTILE_PG_BIN_DIR"
        ),
    }
}

fn running_as_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// Gives `dir` to the `postgres` user, which `apt-get install postgresql` creates.
fn chown_to_postgres(dir: &Path) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run id");
        assert!(
            out.status.success(),
            "no `postgres` user to run the server as (root may not): \
             run `apt-get install -y postgresql`, which creates it"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("numeric id")
    };
    std::os::unix::fs::chown(dir, Some(id("-u")), Some(id("-g"))).expect("chown the temp dir");
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
