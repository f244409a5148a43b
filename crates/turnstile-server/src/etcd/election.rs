//! etcd's Election service (v3election) over Turnstile's elections (docs/elections.md):
//! `Campaign` queues first come, first served and answers when the campaign leads, with the
//! leader key `<name>/<lease id in hex>` whose `rev` is the leadership's fencing token (the
//! entry that made it leader). `Proclaim` and `Resign` take that leader key back.
//!
//! As with `Lock`, a campaign waits at most `WAIT_MS_MAX` (etcd: for ever). `Resign` by a
//! campaign that no longer leads succeeds and changes nothing, as etcd's does. `Leader`
//! answers the value and the fencing token (as `create_revision`); Turnstile does not keep a
//! leader's `mod_revision` or `version`, which answer 0. `Observe` is in [`crate::etcd::observe`].

use std::sync::Arc;

use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};
use turnstile_core::{ApplyError, Command, Outcome};
use turnstile_etcd_proto::mvccpb::KeyValue;
use turnstile_etcd_proto::v3electionpb::{
    election_server::Election, CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest,
    LeaderResponse, ProclaimRequest, ProclaimResponse, ResignRequest, ResignResponse,
};

use crate::api::acquire::{self, WAIT_MS_MAX};
use crate::app::App;
use crate::error::ApiError;
use crate::etcd::common::{caller, header, lease, signed, status, unexpected, unsigned, utf8};
use crate::etcd::lock::lock_key;
use crate::proto::{ReadAnswer, ReadQuery};

/// etcd's answer when a leader key no longer leads.
const NOT_LEADER: &str = "election: not leader";
/// etcd's answer when an election has no leader.
const NO_LEADER: &str = "election: no leader";

/// The Election service.
pub struct ElectionService {
    pub app: Arc<App>,
}

fn name_of(bytes: &[u8]) -> Result<String, Status> {
    let name = utf8("name", bytes)?;
    crate::api::validate::lock_name(&name).map_err(|e| status(&e))?;
    Ok(name)
}

/// A leader key's election, lease and token.
fn leader_of(key: Option<LeaderKey>) -> Result<(String, u64, u64), Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("a leader key is required"))?;
    let name = name_of(&key.name)?;
    let lease_id =
        lease(key.lease)?.ok_or_else(|| Status::invalid_argument("the leader key has no lease"))?;
    Ok((name, lease_id, unsigned("rev", key.rev)?))
}

/// Turnstile's `not_leader` as etcd's.
fn election_status(e: &ApiError) -> Status {
    match e {
        ApiError::Apply(ApplyError::NotLeader { .. }) => Status::failed_precondition(NOT_LEADER),
        e => status(e),
    }
}

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        req: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let name = name_of(&r.name)?;
        let lease_id = lease(r.lease)?
            .ok_or_else(|| Status::invalid_argument("Campaign needs a lease (etcd: a session)"))?;
        let value = crate::etcd::common::value(&r.value)?;
        let command = Command::Campaign {
            name: name.clone(),
            lease_id,
            value,
            wait_ms: WAIT_MS_MAX,
        };
        let w = acquire::run_queued(self.app.clone(), caller, None, WAIT_MS_MAX, command)
            .await
            .map_err(|e| match e {
                ApiError::Apply(ApplyError::WaitTimeout { .. }) => {
                    Status::deadline_exceeded(format!(
                        "campaigned {} s without leading; the campaign was cancelled",
                        WAIT_MS_MAX / 1_000
                    ))
                }
                e => election_status(&e),
            })?;
        let Outcome::Granted { token, .. } = w.outcome else {
            return Err(unexpected(&w.outcome));
        };
        Ok(Response::new(CampaignResponse {
            header: header(&self.app, token),
            leader: Some(LeaderKey {
                key: lock_key(&name, lease_id).into_bytes(),
                name: name.into_bytes(),
                rev: signed(token),
                lease: signed(lease_id),
            }),
        }))
    }

    async fn proclaim(
        &self,
        req: Request<ProclaimRequest>,
    ) -> Result<Response<ProclaimResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let r = req.into_inner();
        let (name, lease_id, token) = leader_of(r.leader)?;
        let value = crate::etcd::common::value(&r.value)?;
        let command = Command::Proclaim {
            name,
            lease_id,
            token,
            value,
        };
        let w = self
            .app
            .write(&caller, None, command)
            .await
            .map_err(|e| election_status(&e))?;
        Ok(Response::new(ProclaimResponse {
            header: header(&self.app, w.revision),
        }))
    }

    async fn leader(
        &self,
        req: Request<LeaderRequest>,
    ) -> Result<Response<LeaderResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let name = name_of(&req.get_ref().name)?;
        let answer = self
            .app
            .read(&caller, ReadQuery::Election { name: name.clone() })
            .await
            .map_err(|e| status(&e))?;
        let ReadAnswer::Election(view) = answer else {
            return Err(unexpected(&answer));
        };
        let leader = view.leader.ok_or_else(|| Status::not_found(NO_LEADER))?;
        let revision = self.app.sm.read().state.applied_index;
        // Another tenant's lease id and token are hidden (None): the key cannot be named then.
        let (Some(lease_id), Some(token)) = (leader.lease_id, leader.token) else {
            return Err(Status::permission_denied(
                "the election's leader is another principal's",
            ));
        };
        Ok(Response::new(LeaderResponse {
            header: header(&self.app, revision),
            kv: Some(KeyValue {
                key: lock_key(&name, lease_id).into_bytes(),
                create_revision: signed(token),
                mod_revision: 0,
                version: 0,
                value: crate::etcd::common::value_bytes(leader.value),
                lease: signed(lease_id),
            }),
        }))
    }

    async fn observe(
        &self,
        req: Request<LeaderRequest>,
    ) -> Result<Response<BoxStream<LeaderResponse>>, Status> {
        let name = name_of(&req.get_ref().name)?;
        crate::etcd::observe::observe(&self.app, req, name).await
    }

    async fn resign(
        &self,
        req: Request<ResignRequest>,
    ) -> Result<Response<ResignResponse>, Status> {
        let caller = caller(&self.app, &req).await?;
        let (name, lease_id, token) = leader_of(req.into_inner().leader)?;
        let command = Command::Resign {
            name,
            lease_id,
            token,
        };
        let revision = match self.app.write(&caller, None, command).await {
            Ok(w) => w.revision,
            // As etcd: resigning what no longer leads changes nothing and succeeds.
            Err(ApiError::Apply(ApplyError::NotLeader { .. })) => {
                self.app.sm.read().state.applied_index
            }
            Err(e) => return Err(status(&e)),
        };
        Ok(Response::new(ResignResponse {
            header: header(&self.app, revision),
        }))
    }
}
