//! Failure stories about process and network faults, against real node processes: quorum loss
//! (story 6), a holder cut off from the network (story 7), a renewal from a process frozen past
//! its TTL (story 9), a leader paused with requests queued at it (story 10), and a follower
//! coming back from a real partition (story 11); disk faults (story 12) in
//! `stories_faults/disk.rs`.

/// Story 12: a failed fdatasync (libfiu), and its negative control.
mod disk;

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

/// Waits until a node of `group` leads in a term after `old_term`; returns it and its term.
async fn leader_among(
    tc: &TestCluster,
    group: &[u64],
    old_term: u64,
) -> anyhow::Result<(u64, u64)> {
    wait_until("a leader in the group", Duration::from_secs(15), || async {
        for &id in group {
            let s = tc.status(id).await.ok()?;
            let term = s["term"].as_u64()?;
            if s["state"] == "Leader" && term > old_term {
                return Some((id, term));
            }
        }
        None
    })
    .await
}

/// Sends an acquire of `minority-{id}` and a lease grant to minority node `id`; both must be
/// refused with `503 no_quorum`. Returns how long each refusal took.
async fn refused_on_minority(tc: &TestCluster, id: u64, lease: u64) -> anyhow::Result<(u64, u64)> {
    let t = Instant::now();
    let (code, v) = tc
        .try_acquire_on(id, &format!("minority-{id}"), lease)
        .await?;
    let acquire_ms = ms(t.elapsed());
    assert_eq!(
        (code, error_code(&v)),
        (503, "no_quorum"),
        "node {id} acquire: {v}"
    );
    let t = Instant::now();
    let (code, v) = tc
        .post(id, "/v1/leases", json!({ "ttl_ms": 5_000 }))
        .await?;
    let grant_ms = ms(t.elapsed());
    assert_eq!(
        (code, error_code(&v)),
        (503, "no_quorum"),
        "node {id} lease grant: {v}"
    );
    Ok((acquire_ms, grant_ms))
}

/// Try-acquires `majority-{id}` on majority node `id`: granted, in `term` or later. Returns
/// the token.
async fn granted_on_majority(
    tc: &TestCluster,
    id: u64,
    lease: u64,
    term: u64,
) -> anyhow::Result<u64> {
    let (code, v) = tc
        .try_acquire_on(id, &format!("majority-{id}"), lease)
        .await?;
    assert_eq!(code, 200, "majority node {id}: {v}");
    assert!(json_u64(&v, "term")? >= term);
    json_u64(&v, "token")
}

/// Story 6: five nodes split 2|3 (the leader in the minority). The minority answers
/// `503 no_quorum` and grants nothing; the majority keeps granting; after heal all nodes
/// converge on one state digest at one applied index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_grants_nothing_and_majority_keeps_granting() -> anyhow::Result<()> {
    let tc = start_cluster(5, "").await?;
    let (old_leader, old_term) = tc.leader().await?;
    let others: Vec<u64> = tc.ids().into_iter().filter(|&i| i != old_leader).collect();
    let minority = vec![old_leader, others[0]];
    let majority = others[1..].to_vec();
    let mut leases = Vec::new();
    for _ in 0..tc.ids().len() {
        leases.push(tc.grant_lease(60_000).await?);
    }

    let cut = Instant::now();
    tc.partition(&[minority.clone(), majority.clone()])?;
    let (new_leader, new_term) = leader_among(&tc, &majority, old_term).await?;
    let elected_ms = ms(cut.elapsed());
    // Both minority nodes at once, while the majority grants.
    let refusals = futures::future::try_join_all(
        minority
            .iter()
            .zip(&leases)
            .map(|(&id, &lease)| refused_on_minority(&tc, id, lease)),
    );
    let grants = futures::future::try_join_all(
        majority
            .iter()
            .zip(&leases[minority.len()..])
            .map(|(&id, &lease)| granted_on_majority(&tc, id, lease, new_term)),
    );
    let (refusal_ms, majority_tokens) = futures::future::try_join(refusals, grants).await?;

    tc.heal()?;
    let healed = Instant::now();
    let converged = tc.converged().await?;
    let converged_ms = ms(healed.elapsed());
    for &id in &minority {
        let s = tc.lock_state(&format!("minority-{id}")).await?;
        assert!(s.holders.is_empty() && s.waiters.is_empty(), "{s:?}");
    }
    eprintln!(
        "story 6: leader {old_leader} (term {old_term}) cut off with {}; majority {majority:?} \
         elected {new_leader} (term {new_term}) in {elected_ms} ms and granted tokens \
         {majority_tokens:?}; minority refusals (acquire ms, lease grant ms) {refusal_ms:?}; \
         converged {converged_ms} ms after heal at (node, applied index) {:?}",
        minority[1],
        converged.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>()
    );
    let first = &converged[0];
    assert_eq!(converged.len(), 5);
    assert!(converged.iter().all(|c| c.1 == first.1 && c.2 == first.2));
    Ok(())
}

/// Pause between two polls of story 7: far below the gap being measured (the client's
/// safety margin, 200 ms at a 2 s TTL).
const POLL_GAP_MS: u64 = 5;

/// One poll of the lock from the host: when it was sent (unix ms) and who held the lock.
#[derive(Debug, Clone)]
struct Poll {
    invoked_ms: u64,
    holder: Option<u64>,
}

/// Polls `lock` from the host until lease `until` holds it (or `timeout` passes).
async fn poll_holders(tc: &TestCluster, lock: &str, until: u64, timeout: Duration) -> Vec<Poll> {
    let deadline = Instant::now() + timeout;
    let mut polls = Vec::new();
    while Instant::now() < deadline {
        let invoked_ms = unix_ms();
        if let Ok(s) = tc.lock_state(lock).await {
            polls.push(Poll {
                invoked_ms,
                holder: s.holder(),
            });
            if s.holder() == Some(until) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(POLL_GAP_MS)).await;
    }
    polls
}

/// Story 7: cut a holder's namespace off from every node: its `lost` fires while the cluster
/// still shows it as the holder, so before anyone else is granted. Reconnected, its stale
/// fenced put is refused and logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_holder_learns_it_lost_before_anyone_else_is_granted() -> anyhow::Result<()> {
    const LOCK: &str = "cut-lock";
    const TTL_MS: u64 = 2_000;
    let mut tc = start_cluster(3, "").await?;
    let mut h = HolderProc::spawn(&mut tc, "hc", 101, LOCK, TTL_MS)?;
    let g = h.granted(ANSWER).await?;
    let waiter_lease = tc.grant_lease(30_000).await?;
    let (http, endpoint) = (long_http(&tc)?, tc.endpoint(tc.any()?));
    let waiter = async move {
        let r = acquire_wait(&http, &endpoint, LOCK, waiter_lease, 30_000).await;
        (r, unix_ms())
    };
    let waiter = tokio::spawn(waiter);
    tc.wait_queued(LOCK, waiter_lease).await?;

    let cut_ms = unix_ms();
    tc.cut_client(&h.host)?;
    let (polls, lost, answer) = tokio::join!(
        poll_holders(&tc, LOCK, waiter_lease, Duration::from_secs(15)),
        h.wait_lost(Duration::from_secs(10)),
        tokio::time::timeout(Duration::from_secs(15), waiter),
    );
    let lost = lost?;
    let (answer, granted_ms) = answer??;
    let (code, v) = answer?;
    assert_eq!(code, 200, "{v}");
    let showing = |lease: u64| polls.iter().filter(move |p| p.holder == Some(lease));
    let last_old = showing(g.lease_id).map(|p| p.invoked_ms).max().unwrap();
    let first_new = showing(waiter_lease).map(|p| p.invoked_ms).min().unwrap();
    let since_cut = |t: u64| t.saturating_sub(cut_ms);
    eprintln!(
        "story 7: after the cut (+0 = {cut_ms}): lost at +{} ms ({:?}); last poll showing the \
         old holder invoked at +{} ms; first showing the new one at +{} ms; waiter answered at \
         +{} ms ({} polls)",
        since_cut(lost.at_ms),
        lost.line,
        since_cut(last_old),
        since_cut(first_new),
        since_cut(granted_ms),
        polls.len()
    );
    assert!(
        lost.at_ms < last_old,
        "lost at {} is not before a poll (invoked {last_old}) that still showed the old holder",
        lost.at_ms
    );
    assert!(lost.at_ms < granted_ms && last_old < first_new);

    tc.heal()?;
    let put = h.call("put cut-key stale", ANSWER).await?;
    eprintln!("story 7: after reconnecting, the stale put answers {put:?}");
    assert_eq!(put, "fenced");
    assert!(tc.any_log_contains("fenced write rejected"));
    Ok(())
}

/// Story 9: a holder frozen past its TTL renews after SIGCONT: the keepalive fails and the
/// `lost` line appears at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_from_a_holder_frozen_past_its_ttl_fails_and_lost_fires_at_once(
) -> anyhow::Result<()> {
    const TTL_MS: u64 = 2_000;
    let mut tc = start_cluster(3, "").await?;
    let mut h = HolderProc::spawn(&mut tc, "hf", 101, "frozen-lock", TTL_MS)?;
    let g = h.granted(ANSWER).await?;
    assert_eq!(h.call("keepalive", ANSWER).await?, "ok");

    h.stop()?;
    let stopped = Instant::now();
    // The freeze must outlast the lease: wait until the cluster has expired it.
    wait_until("the lease to expire", Duration::from_secs(15), || async {
        let (code, _) = tc.lease(g.lease_id).await.ok()?;
        (code == 404).then_some(())
    })
    .await?;
    let frozen_ms = ms(stopped.elapsed());
    assert!(h.lost().is_empty(), "a frozen process printed lost");

    let cont_ms = unix_ms();
    h.cont()?;
    let keepalive = h.call("keepalive", ANSWER).await?;
    let keepalive_ms = unix_ms() - cont_ms;
    let lost = h.wait_lost(Duration::from_secs(5)).await?;
    eprintln!(
        "story 9: frozen {frozen_ms} ms (TTL {TTL_MS}); after SIGCONT the keepalive answered \
         {keepalive:?} in {keepalive_ms} ms; lost at +{} ms: {}",
        lost.at_ms.saturating_sub(cont_ms),
        lost.line
    );
    assert!(keepalive.starts_with("lost "), "{keepalive}");
    assert!(
        lost.at_ms <= cont_ms + 1_000,
        "lost {} ms after SIGCONT",
        lost.at_ms.saturating_sub(cont_ms)
    );
    Ok(())
}

/// Story 10's lock and key.
const PL_LOCK: &str = "pl-lock";
const PL_KEY: &str = "pl-key";

/// Sends one waiting acquire of [`PL_LOCK`] per lease to node `old` as raw requests, then
/// pauses it. The first half are confirmed queued before the pause; the second half are only
/// written to its socket just before it, whatever it made of them.
async fn queue_acquires_then_pause(
    tc: &mut TestCluster,
    old: u64,
    leases: &[u64],
) -> anyhow::Result<Vec<(u64, RawRequest)>> {
    let addr = tc.addr(old);
    let acquire = |lease: u64| async move {
        let body =
            json!({ "lease_id": lease, "wait_ms": 30_000, "request_id": format!("pl-{lease}") });
        let path = format!("/v1/locks/{PL_LOCK}/acquire");
        RawRequest::send(addr, "POST", &path, Some(&body)).await
    };
    let (first, second) = leases.split_at(leases.len() / 2);
    let mut requests = Vec::new();
    for &lease in first {
        requests.push((lease, acquire(lease).await?));
    }
    let last = *first.last().unwrap();
    wait_until(
        "the first waiters to queue",
        Duration::from_secs(10),
        || async {
            let s = tc.lock_state_on(old, PL_LOCK).await.ok()?;
            s.waiters.contains(&last).then_some(())
        },
    )
    .await?;
    for &lease in second {
        requests.push((lease, acquire(lease).await?));
    }
    tc.pause(old)?;
    Ok(requests)
}

/// Story 10: pause the leader past the election timeout and the waiters' TTL, with acquires
/// queued at it; resume it. No acquire is granted on its authority (every `200` carries a
/// later term) and no read it serves is stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_grants_nothing_and_serves_no_stale_read() -> anyhow::Result<()> {
    const WAITER_TTL_MS: u64 = 2_000;
    const WAITERS: usize = 6;
    const ANSWER_WAIT: Duration = Duration::from_secs(40);
    // Plain HTTP: the acquires and the read are written to the frozen leader's socket, and a
    // TLS handshake would need it awake (see `RawRequest`).
    let mut tc = start_insecure_cluster(3, "").await?;
    let (old, old_term) = tc.leader().await?;
    let holder = tc.grant_lease_on(old, 60_000).await?;
    let (code, v) = tc.try_acquire_on(old, PL_LOCK, holder).await?;
    assert_eq!(code, 200, "{v}");
    let token = json_u64(&v, "token")?;
    let (code, v) = tc.put_on(old, PL_KEY, json!({ "value": "old" })).await?;
    assert_eq!(code, 200, "{v}");
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(tc.grant_lease_on(old, WAITER_TTL_MS).await?);
    }
    let requests = queue_acquires_then_pause(&mut tc, old, &waiters).await?;
    let paused = Instant::now();

    let (new, new_term) = tc.leader().await?;
    let elected_ms = ms(paused.elapsed());
    assert!(new != old && new_term > old_term);
    // Under the new leader: free the lock (the head waiter, if its lease lives, is granted in
    // the new term), write the key, and wait until every waiter's lease has expired.
    let (code, v) = tc.release(PL_LOCK, token, holder).await?;
    assert_eq!(code, 200, "{v}");
    let (code, v) = tc.put_on(new, PL_KEY, json!({ "value": "new" })).await?;
    assert_eq!(code, 200, "{v}");
    wait_until(
        "the waiters' leases to expire",
        Duration::from_secs(20),
        || async {
            for &l in &waiters {
                if tc.lease(l).await.ok()?.0 != 404 {
                    return None;
                }
            }
            Some(())
        },
    )
    .await?;
    // A read queued at the frozen old leader, answered only once it resumes.
    let path = format!("/v1/kv/{PL_KEY}");
    let queued_read = RawRequest::send(tc.addr(old), "GET", &path, None).await?;
    let paused_ms = ms(paused.elapsed());
    tc.resume(old)?;

    let (read_code, read) = queued_read.answer(ANSWER_WAIT).await?;
    let (fresh_code, fresh) = tc.get(old, &path).await?;
    let mut answers = Vec::new();
    for (lease, req) in requests {
        let (code, v) = req.answer(ANSWER_WAIT).await?;
        answers.push((lease, code, error_code(&v).to_string(), v["term"].as_u64()));
        if code == 200 {
            let term = json_u64(&v, "term")?;
            assert!(
                term > old_term,
                "lease {lease} granted in term {term} by the paused leader: {v}"
            );
        }
    }
    eprintln!(
        "story 10: leader {old} (term {old_term}) paused {paused_ms} ms; {new} elected (term \
         {new_term}) after {elected_ms} ms; queued read after resume: {read_code} {read}; read \
         right after: {fresh_code} {fresh}; acquire answers (lease, status, code, term): \
         {answers:?}"
    );
    for (code, v) in [(read_code, &read), (fresh_code, &fresh)] {
        assert!(
            code != 200 || v["value"] == "new",
            "stale read from the resumed leader: {v}"
        );
    }
    Ok(())
}

/// The nodes' default `request-timeout-ms`: how long a write may wait to commit.
const REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Sends a try-acquire of `lock` with a fixed `request_id` to node `id`: status, body, ms.
async fn acquire_with_id(
    tc: &TestCluster,
    id: u64,
    lock: &str,
    lease: u64,
    request_id: &str,
) -> anyhow::Result<(u16, Value, u64)> {
    let t = Instant::now();
    let (code, v) = tc
        .post(
            id,
            &format!("/v1/locks/{lock}/acquire"),
            json!({ "lease_id": lease, "wait_ms": 0, "request_id": request_id }),
        )
        .await?;
    Ok((code, v, ms(t.elapsed())))
}

/// Story 11: a follower cut off by nftables for ten election timeouts, then healed, changes
/// neither the leader nor its term: with PreVote it never campaigned at a higher term, so the
/// leader's next heartbeat meets no higher term. (The control, PreVote switched off, is in
/// `tests/tests/suite/prevote.rs`, where the node's runtime switch can be reached.)
///
/// Writes sent to it meanwhile are answered before their request timeout, though its link to
/// the leader drops packets instead of refusing them: the first, sent at the cut and forwarded
/// to the leader, `504 indeterminate` (or `503 no_quorum`) once the leader falls silent, and
/// its resend with the same `request_id` through the leader is granted exactly once; the next
/// `503 no_quorum`, as nothing is forwarded to a silent leader. (Before, the forward waited
/// out the whole request timeout, and every later write did the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_back_from_a_partition_does_not_depose_the_leader() -> anyhow::Result<()> {
    let tc = start_cluster(3, "").await?;
    let (leader, term) = tc.leader().await?;
    let follower = tc
        .ids()
        .into_iter()
        .find(|&i| i != leader)
        .expect("a follower");
    let rest: Vec<u64> = tc.ids().into_iter().filter(|&i| i != follower).collect();
    let lease = tc.grant_lease_on(leader, 60_000).await?;
    let cut = Instant::now();
    tc.partition(&[vec![follower], rest])?;

    let (code, v, first_ms) = acquire_with_id(&tc, follower, "cut-1", lease, "story11-1").await?;
    assert!(
        matches!(
            (code, error_code(&v)),
            (504, "indeterminate") | (503, "no_quorum")
        ),
        "first write into the cut: {code} {v}"
    );
    assert!(
        first_ms < REQUEST_TIMEOUT_MS,
        "the first write into the cut waited out the request timeout: {first_ms} ms"
    );
    let (code, v, _) = acquire_with_id(&tc, leader, "cut-1", lease, "story11-1").await?;
    assert_eq!(code, 200, "resent through the leader: {v}");
    let token = json_u64(&v, "token")?;
    let (code, v, _) = acquire_with_id(&tc, leader, "cut-1", lease, "story11-1").await?;
    assert_eq!(
        (code, json_u64(&v, "token")?),
        (200, token),
        "resent again: {v}"
    );

    let (code, v, second_ms) = acquire_with_id(&tc, follower, "cut-2", lease, "story11-2").await?;
    assert_eq!(
        (code, error_code(&v)),
        (503, "no_quorum"),
        "second write into the cut"
    );
    assert!(
        second_ms < REQUEST_TIMEOUT_MS,
        "second write: {second_ms} ms"
    );
    let s = tc.lock_state_on(leader, "cut-2").await?;
    assert!(s.holders.is_empty(), "a refused write was granted: {s:?}");

    let cut_ms = 10 * ELECTION_TIMEOUT_MS_MAX;
    tokio::time::sleep(Duration::from_millis(cut_ms).saturating_sub(cut.elapsed())).await;
    let cut_term = json_u64(&tc.status(follower).await?, "term")?;
    assert_eq!(cut_term, term, "the cut-off node raised its term");
    tc.heal()?;
    wait_until(
        "the healed follower to follow the leader",
        Duration::from_secs(15),
        || async {
            let s = tc.status(follower).await.ok()?;
            (s["leader_id"].as_u64() == Some(leader) && s["term"].as_u64() == Some(term))
                .then_some(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(3 * ELECTION_TIMEOUT_MS_MAX)).await;
    for id in tc.ids() {
        let s = tc.status(id).await?;
        assert_eq!(
            (s["leader_id"].as_u64(), s["term"].as_u64()),
            (Some(leader), Some(term)),
            "node {id} after the heal: {s}"
        );
    }
    eprintln!(
        "story 11: follower {follower} cut off by nftables for {cut_ms} ms; leader {leader} kept \
         term {term}; writes into the cut answered after {first_ms} ms (forwarded) and \
         {second_ms} ms (not forwarded)"
    );
    Ok(())
}
