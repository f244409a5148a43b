//! Failure stories about fencing, against real node processes and holder processes in their own
//! namespaces: a holder frozen past its TTL is refused by the fenced ledger and by the store
//! (story 1), a holder of another cluster is refused by cluster id (story 8), and the negative
//! controls that show what happens without fencing (story 12).

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;
use turnstile_fence::ledger::{Ledger, LedgerStats, Mode};
use turnstile_fence::Fence;

const LOCK: &str = "acct-lock";
const ACCOUNT: &str = "alice";
const KEY: &str = "acct-note";
/// The holders' session TTL.
const TTL_MS: u64 = 2_000;
/// The balance the first holder writes before it freezes.
const INITIAL: i64 = 100;

/// What a run of the frozen-holder story measured.
struct FrozenRun {
    token_a: u64,
    token_b: u64,
    /// From SIGSTOP of A to B's grant: A's lease had to expire first.
    stop_to_b_grant_ms: u64,
    /// A's answer to its stale `ledger-set` (its pre-pause read + 1).
    a_ledger_set: String,
    /// A's answer to its stale fenced `put`.
    a_put: String,
    /// Increments that some holder was told succeeded.
    acked_increments: i64,
    final_balance: i64,
    final_key_value: String,
    stats: LedgerStats,
    a_lost: Option<LostLine>,
    rejection_logged: bool,
    node_fenced_rejections: u64,
}

/// Story 1's schedule: holder A writes the account and reads it, freezes past its TTL; holder B
/// takes the lock and does a read-modify-write of the account (`b_writes`) or only a fenced
/// read; A resumes and writes its stale read + 1, then a fenced `put` to the store.
async fn frozen_holder_run(
    ledger: Ledger,
    bugs: &str,
    b_writes: bool,
) -> anyhow::Result<FrozenRun> {
    let mut tc = start_cluster(3, bugs).await?;
    let server = LedgerServer::serve(ledger, &[tc.net().host_ip()]).await?;
    let url = server.url().to_string();

    let mut a = HolderProc::spawn(&mut tc, "ha", 101, LOCK, TTL_MS)?;
    let ga = a.granted(ANSWER).await?;
    let set = a
        .call(&format!("ledger-set {url} {ACCOUNT} {INITIAL}"), ANSWER)
        .await?;
    assert_eq!(ok_number(&set)?, INITIAL, "A's first write");
    let a_read = ok_number(
        &a.call(&format!("ledger-get {url} {ACCOUNT}"), ANSWER)
            .await?,
    )?;
    assert_eq!(a.call(&format!("put {KEY} from-a"), ANSWER).await?, "ok");

    a.stop()?;
    let stopped = Instant::now();
    // B's grant is the proof that A's freeze outlived its lease: the lock passes on only when
    // the lease has expired on the cluster.
    let mut b = HolderProc::spawn(&mut tc, "hb", 102, LOCK, TTL_MS)?;
    let gb = b.granted(Duration::from_secs(20)).await?;
    let stop_to_b_grant_ms = ms(stopped.elapsed());
    assert!(
        gb.token > ga.token,
        "tokens grow: {} then {}",
        ga.token,
        gb.token
    );
    let b_read = ok_number(
        &b.call(&format!("ledger-get {url} {ACCOUNT}"), ANSWER)
            .await?,
    )?;
    let mut acked_increments = 0;
    if b_writes {
        let cmd = format!("ledger-set {url} {ACCOUNT} {}", b_read + 1);
        let b_set = b.call(&cmd, ANSWER).await?;
        assert_eq!(ok_number(&b_set)?, b_read + 1, "B's increment");
        acked_increments += 1;
    }
    assert_eq!(b.call(&format!("put {KEY} from-b"), ANSWER).await?, "ok");

    a.cont()?;
    let a_ledger_set = a
        .call(
            &format!("ledger-set {url} {ACCOUNT} {}", a_read + 1),
            ANSWER,
        )
        .await?;
    if a_ledger_set.starts_with("ok") {
        acked_increments += 1;
    }
    let a_put = a.call(&format!("put {KEY} stale-from-a"), ANSWER).await?;
    let a_lost = a.wait_lost(Duration::from_secs(5)).await.ok();

    let (code, v) = tc.get(tc.any()?, &format!("/v1/kv/{KEY}")).await?;
    assert_eq!(code, 200, "{v}");
    Ok(FrozenRun {
        token_a: ga.token,
        token_b: gb.token,
        stop_to_b_grant_ms,
        a_ledger_set,
        a_put,
        acked_increments,
        final_balance: server.balance(ACCOUNT)?,
        final_key_value: v["value"].as_str().unwrap_or_default().to_string(),
        stats: server.stats(),
        a_lost,
        rejection_logged: tc.any_log_contains("fenced write rejected"),
        node_fenced_rejections: tc.fenced_rejections().await?,
    })
}

fn report(story: &str, r: &FrozenRun) {
    eprintln!(
        "{story}: token A {} B {}; SIGSTOP->B granted {} ms; A stale ledger-set: {}; A stale put: \
         {}; balance {} (initial {INITIAL}, acked increments {}); key {:?}; ledger stats {:?}; \
         A lost: {:?}; logged {}; node fenced_rejections {}",
        r.token_a,
        r.token_b,
        r.stop_to_b_grant_ms,
        r.a_ledger_set,
        r.a_put,
        r.final_balance,
        r.acked_increments,
        r.final_key_value,
        r.stats,
        r.a_lost.as_ref().map(|l| &l.line),
        r.rejection_logged,
        r.node_fenced_rejections,
    );
}

/// The checks shared by both variants of story 1 (fenced ledger, correct server).
fn assert_stale_holder_refused(r: &FrozenRun) -> anyhow::Result<()> {
    let body = fenced_body(&r.a_ledger_set)?;
    assert_eq!(error_code(&body), "fenced", "{body}");
    assert_eq!(body["highest"], json!(r.token_b), "{body}");
    assert_eq!(r.a_put, "fenced", "the store refuses A's stale put");
    assert_eq!(r.final_key_value, "from-b");
    assert_eq!(
        r.final_balance,
        INITIAL + r.acked_increments,
        "no update lost"
    );
    assert!(r.stats.fence.rejected_stale >= 1, "{:?}", r.stats);
    assert!(r.rejection_logged, "no node logged `fenced write rejected`");
    assert!(r.node_fenced_rejections >= 1);
    assert!(r.a_lost.is_some(), "A never printed lost");
    Ok(())
}

/// Story 1a: the new holder does a fenced read-modify-write; the frozen one's write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_is_fenced_after_a_read_modify_write() -> anyhow::Result<()> {
    let r = frozen_holder_run(Ledger::fenced(), "", true).await?;
    report("story 1a (B read-modify-write)", &r);
    assert_stale_holder_refused(&r)?;
    assert_eq!(r.final_balance, INITIAL + 1);
    Ok(())
}

/// Story 1b: the new holder only reads (fenced); that read alone fences the frozen one out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_is_fenced_after_a_fenced_read() -> anyhow::Result<()> {
    let r = frozen_holder_run(Ledger::fenced(), "", false).await?;
    report("story 1b (B fenced read only)", &r);
    assert_stale_holder_refused(&r)?;
    assert_eq!(r.final_balance, INITIAL);
    Ok(())
}

/// Story 12a (negative control): the same schedule against an unfenced ledger loses an update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_unfenced_ledger_loses_the_update() -> anyhow::Result<()> {
    let r = frozen_holder_run(Ledger::unfenced(), "", true).await?;
    report("story 12a (unfenced ledger)", &r);
    assert_eq!(
        ok_number(&r.a_ledger_set)?,
        INITIAL + 1,
        "the stale set is accepted"
    );
    assert_eq!(r.acked_increments, 2);
    assert!(
        r.final_balance - INITIAL < r.acked_increments,
        "an acknowledged increment is lost: balance {} after {} increments from {INITIAL}",
        r.final_balance,
        r.acked_increments
    );
    // The store is still fenced: only the ledger was left unprotected.
    assert_eq!(r.a_put, "fenced");
    Ok(())
}

/// Story 12b (negative control): with the `skip-fence` bug the store accepts the stale put.
/// This fails if the bug switch stops working, so the checks above are known to bite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_skip_fence_bug_accepts_the_stale_put() -> anyhow::Result<()> {
    let r = frozen_holder_run(Ledger::fenced(), "skip-fence", true).await?;
    report("story 12b (bugs=skip-fence)", &r);
    assert_eq!(r.a_put, "ok", "the broken server must accept the stale put");
    assert_eq!(r.final_key_value, "stale-from-a");
    assert_eq!(r.node_fenced_rejections, 0);
    // The ledger's own fence does not depend on the server: it still refuses.
    assert_eq!(error_code(&fenced_body(&r.a_ledger_set)?), "fenced");
    Ok(())
}

/// Story 8: two clusters, one ledger pinned to the first; a holder of the second cluster is
/// refused by cluster id even though its token is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_of_another_cluster_is_refused_by_cluster_id() -> anyhow::Result<()> {
    let mut one = start_cluster(3, "").await?;
    let mut two = start_cluster(1, "").await?;
    let id_one = one.status(one.any()?).await?["cluster_id"]
        .as_str()
        .unwrap()
        .to_string();
    let ledger = Ledger::new(Mode::Fenced, Fence::pinned(id_one.clone())?);
    // One ledger, reachable from both bridges.
    let server = LedgerServer::serve(ledger, &[one.net().host_ip(), two.net().host_ip()]).await?;
    let (url_one, url_two) = (server.urls[0].clone(), server.urls[1].clone());

    let mut a = HolderProc::spawn(&mut one, "ha", 101, LOCK, 10_000)?;
    let ga = a.granted(ANSWER).await?;
    assert_eq!(ga.cluster_id, id_one);
    let set = a
        .call(&format!("ledger-set {url_one} {ACCOUNT} 10"), ANSWER)
        .await?;
    assert_eq!(ok_number(&set)?, 10);

    // Push the second cluster's log past the first's token, so its grant's token is larger.
    while two.status(two.any()?).await?["applied_index"]
        .as_u64()
        .unwrap()
        <= ga.token + 5
    {
        two.post(two.any()?, "/v1/counters/filler/incr", json!({ "by": 1 }))
            .await?;
    }
    let mut b = HolderProc::spawn(&mut two, "hb", 101, LOCK, 10_000)?;
    let gb = b.granted(ANSWER).await?;
    assert_ne!(gb.cluster_id, id_one);
    assert!(
        gb.token > ga.token,
        "B's token {} > A's {}",
        gb.token,
        ga.token
    );

    let b_set = b
        .call(&format!("ledger-set {url_two} {ACCOUNT} 999"), ANSWER)
        .await?;
    let b_get = b
        .call(&format!("ledger-get {url_two} {ACCOUNT}"), ANSWER)
        .await?;
    let stats = server.stats();
    eprintln!(
        "story 8: cluster one {id_one} token {}; cluster two {} token {}; B set: {b_set}; \
         B get: {b_get}; balance {}; stats {stats:?}",
        ga.token,
        gb.cluster_id,
        gb.token,
        server.balance(ACCOUNT)?
    );
    assert_eq!(error_code(&fenced_body(&b_set)?), "foreign_cluster");
    assert_eq!(error_code(&fenced_body(&b_get)?), "foreign_cluster");
    assert_eq!(server.balance(ACCOUNT)?, 10);
    assert_eq!(stats.fence.rejected_foreign_cluster, 2);
    // A, the rightful holder, still writes.
    let a_set = a
        .call(&format!("ledger-set {url_one} {ACCOUNT} 11"), ANSWER)
        .await?;
    assert_eq!(ok_number(&a_set)?, 11);
    Ok(())
}
