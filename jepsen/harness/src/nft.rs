//! The nftables partition rules both backends (`netns`, `docker`) install inside a receiving
//! host's network namespace: one table whose input chain drops every packet from a set of
//! addresses (Jepsen's grudge model, so a one-way cut is one rule). Each backend only supplies
//! the command that runs `nft -f -` inside the right namespace.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// The nftables table holding one namespace's partition rules.
pub const TABLE: &str = "tjnem";

/// The nft script that replaces the namespace's partition rules with "drop everything from
/// `from`"; an empty set only removes them. One transaction: create (if absent), delete,
/// re-create, so the old rules vanish and the new ones appear atomically.
pub fn drop_script(from: &BTreeSet<Ipv4Addr>) -> String {
    let mut script = format!("add table inet {TABLE}\ndelete table inet {TABLE}\n");
    if !from.is_empty() {
        let set: Vec<String> = from.iter().map(Ipv4Addr::to_string).collect();
        script.push_str(&format!(
            "add table inet {TABLE}\n\
             add chain inet {TABLE} input {{ type filter hook input priority 0 ; policy accept ; }}\n\
             add rule inet {TABLE} input ip saddr {{ {} }} drop\n",
            set.join(", ")
        ));
    }
    script
}

/// Feeds `script` to `nft`, which `cmd` runs inside the namespace `place` names (for errors).
pub fn apply(mut cmd: Command, script: &str, place: &str) -> anyhow::Result<()> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run nft")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .context("cannot write the nft script")?;
    }
    let out = child.wait_with_output().context("nft did not finish")?;
    if !out.status.success() {
        bail!(
            "nft in {place} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_set_only_removes_the_table() {
        assert_eq!(
            drop_script(&BTreeSet::new()),
            "add table inet tjnem\ndelete table inet tjnem\n"
        );
    }

    #[test]
    fn a_set_becomes_one_drop_rule_in_sorted_order() {
        let from = BTreeSet::from([Ipv4Addr::new(10, 0, 0, 12), Ipv4Addr::new(10, 0, 0, 11)]);
        let script = drop_script(&from);
        assert!(
            script.ends_with("add rule inet tjnem input ip saddr { 10.0.0.11, 10.0.0.12 } drop\n")
        );
        assert_eq!(script.matches("add rule").count(), 1);
    }
}
