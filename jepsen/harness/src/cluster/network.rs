//! Partitions of a [`ProcCluster`]: nftables drop rules per receiving node (any grudge,
//! including one-way and overlapping groups), cutting off a client host, and heal.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use anyhow::bail;

use super::{Fabric, NodeProc, Place, ProcCluster};
use crate::netns::NetHost;

impl ProcCluster {
    /// Replaces `node`'s partition rules: it drops every packet from `from`.
    fn drop_at(&self, node: &NodeProc, from: &BTreeSet<Ipv4Addr>) -> anyhow::Result<()> {
        match (&self.fabric, &node.place) {
            (Fabric::Netns(net), Place::Netns { host, .. }) => net.drop_from(host, from),
            (Fabric::Docker(net), Place::Docker { name, .. }) => net.drop_from(name, from),
            _ => bail!("a node of one backend on the network of another"),
        }
    }

    /// Cuts the cluster into `groups`: a node drops packets from every node that shares no
    /// group with it. Groups may overlap (a bridge node in two groups hears both). Nodes in no
    /// group are not touched. The harness (host side) is never cut.
    pub fn partition(&self, groups: &[Vec<u64>]) -> anyhow::Result<()> {
        let ids = self.ids();
        for id in &ids {
            let mine: Vec<&Vec<u64>> = groups.iter().filter(|g| g.contains(id)).collect();
            if mine.is_empty() {
                continue;
            }
            let cut: BTreeSet<Ipv4Addr> = ids
                .iter()
                .filter(|other| !mine.iter().any(|g| g.contains(other)))
                .map(|&other| self.ip(other))
                .collect();
            self.drop_at(&self.nodes[id], &cut)?;
        }
        Ok(())
    }

    /// Cuts one node off from all others, both ways.
    pub fn isolate(&self, id: u64) -> anyhow::Result<()> {
        let rest: Vec<u64> = self.ids().into_iter().filter(|&i| i != id).collect();
        self.partition(&[vec![id], rest])
    }

    /// One-way: `to` drops packets from `from`; `from` still hears `to`.
    pub fn drop_one_way(&self, from: u64, to: u64) -> anyhow::Result<()> {
        let set = BTreeSet::from([self.ip(from)]);
        self.drop_at(&self.nodes[&to], &set)
    }

    /// Cuts client host `host` off from every node, both ways. Replaces the nodes' partition
    /// rules (each node then drops only this client), so do not combine it with `partition`.
    /// Netns backend only.
    pub fn cut_client(&self, host: &NetHost) -> anyhow::Result<()> {
        let Fabric::Netns(net) = &self.fabric else {
            bail!("client hosts need the netns backend");
        };
        let nodes: BTreeSet<Ipv4Addr> = self.nodes.values().map(|n| n.ip).collect();
        net.drop_from(host, &nodes)?;
        let client = BTreeSet::from([host.ip]);
        for node in self.nodes.values() {
            self.drop_at(node, &client)?;
        }
        Ok(())
    }

    /// Removes every partition rule, the client hosts' included.
    pub fn heal(&self) -> anyhow::Result<()> {
        for node in self.nodes.values() {
            self.drop_at(node, &BTreeSet::new())?;
        }
        if let Fabric::Netns(net) = &self.fabric {
            for host in &self.clients {
                net.drop_from(host, &BTreeSet::new())?;
            }
        }
        Ok(())
    }
}
