//! Command-line parsing, without a cluster: client flags beside every subcommand's own,
//! `--cert` and `--key` together, endpoints and tokens checked before anything is sent,
//! durations, and `auth` permissions and quotas. (Unit tests of the crate's library, kept
//! here so the crate has one test executable.)

use std::time::Duration;

use clap::{CommandFactory, Parser};
use turnstile::auth_cmd::{parse_permission, parse_quota, show_perm};
use turnstile::client_cmd::ClientArgs;
use turnstile::{duration_arg, Cli, Cmd};
use turnstile_client::{Access, PermissionKind};

/// The client flags sit beside every subcommand's own: `--key` (the client key, before
/// the command) must not collide with `watch --key` or `kv put KEY`.
#[test]
fn client_flags_do_not_collide_with_subcommands() {
    Cli::command().debug_assert();
    let argv = [
        "turnstile",
        "--cert",
        "c.pem",
        "--key",
        "k.pem",
        "watch",
        "--key",
        "a",
    ];
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string());
    assert!(
        matches!(&cli, Ok(c) if c.client.key.is_some() && matches!(c.command, Cmd::Watch(_))),
        "{:?}",
        cli.err()
    );
    let put = [
        "turnstile",
        "--cert",
        "c",
        "--key",
        "k",
        "kv",
        "put",
        "a",
        "b",
    ];
    assert!(Cli::try_parse_from(put).is_ok());
    assert!(Cli::try_parse_from(["turnstile", "--cert", "c", "status"]).is_err());
}

/// The client flags alone.
#[derive(Parser, Debug)]
struct ClientOnly {
    #[command(flatten)]
    client: ClientArgs,
}

#[test]
fn cert_and_key_go_together() {
    for lone in [["--cert", "c.pem"], ["--key", "k.pem"]] {
        let parsed = ClientOnly::try_parse_from(std::iter::once("turnstile").chain(lone));
        let err = parsed
            .map(|_| ())
            .expect_err("a lone --cert or --key is refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }
    let both = ["turnstile", "--cert", "c.pem", "--key", "k.pem"];
    let cli = ClientOnly::try_parse_from(both).map_err(|e| e.to_string());
    assert!(cli.is_ok(), "{cli:?}");
}

#[test]
fn flags_reach_the_client() {
    let argv = [
        "turnstile",
        "--endpoints",
        "https://10.0.0.1:7001,10.0.0.2:7002",
        "--token",
        "s3cret",
    ];
    let cli = ClientOnly::try_parse_from(argv).map_err(|e| e.to_string());
    let Ok(cli) = cli else {
        panic!("{cli:?}");
    };
    assert!(!format!("{cli:?}").contains("s3cret"));
    // https without --cacert: refused before anything is sent, naming the missing flag.
    let err = cli.client.client().map(|_| ()).expect_err("no CA");
    assert!(err.to_string().contains("--cacert"), "{err:#}");
    // A token over plain HTTP to another host: refused.
    let mut plain = cli.client.clone();
    plain.endpoints = vec!["10.0.0.1:7001".into()];
    let err = plain.client().map(|_| ()).expect_err("token over http");
    assert!(err.to_string().contains("plain HTTP"), "{err:#}");
}

/// No silent default: without --endpoints or TURNSTILE_ENDPOINTS the command is refused
/// with a message naming both.
#[test]
fn endpoints_have_no_default() {
    let cli = ClientOnly::try_parse_from(["turnstile"]).map_err(|e| e.to_string());
    let Ok(mut cli) = cli else {
        panic!("{cli:?}");
    };
    // The environment of the test run must not decide the outcome.
    cli.client.endpoints.clear();
    let err = cli.client.client().map(|_| ()).expect_err("no endpoints");
    let shown = err.to_string();
    assert!(
        shown.contains("--endpoints") && shown.contains("TURNSTILE_ENDPOINTS"),
        "{shown}"
    );
    cli.client.endpoints = vec!["127.0.0.1:7001".into()];
    assert!(cli.client.client().is_ok());
}

#[test]
fn durations_parse_units_and_refuse_garbage() {
    let ok = [
        ("500ms", 500),
        ("10s", 10_000),
        ("10", 10_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        (" 0s ", 0),
    ];
    for (s, ms) in ok {
        assert_eq!(duration_arg::parse(s), Ok(Duration::from_millis(ms)), "{s}");
    }
    for bad in ["", "s", "1.5s", "10x", "-1s", "99999999999999999999h"] {
        assert!(duration_arg::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn permissions_parse_and_refuse() {
    let p = parse_permission("key:cfg:a/:read").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (p.kind, p.prefix.as_str(), p.access),
        (PermissionKind::Key, "cfg:a/", Access::Read)
    );
    assert_eq!(show_perm(&p), "key:cfg:a/:read");
    let empty_prefix = parse_permission("lock::write").map(|p| p.prefix);
    assert_eq!(empty_prefix, Ok(String::new()));
    for bad in ["lock", "lock:p/", "door:p/:write", "lock:p/:admin"] {
        assert!(parse_permission(bad).is_err(), "{bad}");
    }
}

#[test]
fn quotas_parse_and_refuse() {
    assert_eq!(parse_quota("leases=10"), Ok(("leases".into(), 10)));
    for bad in ["leases", "bananas=1", "keys=-1", "keys=x"] {
        assert!(parse_quota(bad).is_err(), "{bad}");
    }
}
