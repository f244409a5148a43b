//! Whether an actual answer has the shape the doc shows, with lease ids and log indexes bound
//! from doc values to the cluster's (the rules are in the module header, `docs_console/mod.rs`).

use std::collections::HashMap;

use serde_json::Value;

/// Doc values bound to the cluster's, per kind.
#[derive(Debug, Default)]
pub struct Bindings {
    pub leases: HashMap<u64, u64>,
    pub indexes: HashMap<u64, u64>,
}

/// JSON keys whose numbers are log indexes, and those that are lease ids.
const INDEX_KEYS: &[&str] = &[
    "token",
    "revision",
    "mod_revision",
    "create_revision",
    "current_token",
    "highest",
];
const LEASE_KEYS: &[&str] = &["lease_id"];
/// JSON keys whose values differ from run to run whatever the doc says (type still checked).
const FREE_KEYS: &[&str] = &["message", "cluster_id", "since_ms", "term"];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lease,
    Index,
}

impl Bindings {
    fn table(&mut self, kind: Kind) -> &mut HashMap<u64, u64> {
        match kind {
            Kind::Lease => &mut self.leases,
            Kind::Index => &mut self.indexes,
        }
    }

    /// Binds doc value `doc` to `actual`, or checks an earlier binding.
    fn bind(&mut self, kind: Kind, doc: u64, actual: u64) -> Result<(), String> {
        let table = self.table(kind);
        match table.get(&doc) {
            Some(&bound) if bound == actual => Ok(()),
            Some(&bound) => Err(format!("{doc} stands for {bound} here, but {actual} came")),
            None => {
                if let Some((d, _)) = table.iter().find(|(_, &a)| a == actual) {
                    return Err(format!("{actual} came for {doc}, but {d} stands for it"));
                }
                table.insert(doc, actual);
                Ok(())
            }
        }
    }

    /// Checks one actual line against the doc's.
    pub fn line(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let (doc_body, doc_status) = split_status(doc);
        let (body, status) = split_status(actual);
        if doc_status != status {
            return Err(format!("status {status:?}, the doc shows {doc_status:?}"));
        }
        if let Some(rest) = doc_body.strip_prefix("id: ") {
            let got = body
                .strip_prefix("id: ")
                .ok_or_else(|| "not an event id line".to_string())?;
            let (d_rev, d_seq) = event_id(rest)?;
            let (a_rev, a_seq) = event_id(got)?;
            if d_seq != a_seq {
                return Err(format!("event seq {a_seq}, the doc shows {d_seq}"));
            }
            return self.bind(Kind::Index, d_rev, a_rev);
        }
        if let Some(rest) = doc_body.strip_prefix("data: ") {
            let got = body
                .strip_prefix("data: ")
                .ok_or_else(|| "not an event data line".to_string())?;
            return self.json_line(rest, got);
        }
        if doc_body.starts_with('{') {
            return self.json_line(doc_body, body);
        }
        self.text(doc_body, body)
    }

    fn json_line(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let d: Value = serde_json::from_str(doc).map_err(|e| format!("the doc's JSON: {e}"))?;
        let a: Value = serde_json::from_str(actual).map_err(|e| format!("not JSON: {e}"))?;
        self.json("", &d, &a)
    }

    fn json(&mut self, key: &str, d: &Value, a: &Value) -> Result<(), String> {
        let at = |m: String| {
            if key.is_empty() {
                m
            } else {
                format!("{key}: {m}")
            }
        };
        match (d, a) {
            (Value::Object(d), Value::Object(a)) => {
                let mut dk: Vec<_> = d.keys().collect();
                let mut ak: Vec<_> = a.keys().collect();
                dk.sort();
                ak.sort();
                if dk != ak {
                    return Err(at(format!("keys {ak:?}, the doc shows {dk:?}")));
                }
                for (k, dv) in d {
                    // "tokens": {name: token} and "cycle": [lease ids] bind their elements.
                    let inner = match (key, k.as_str()) {
                        ("tokens", _) => "token",
                        (_, "cycle") => "lease_id",
                        (_, other) => other,
                    };
                    self.json(inner, dv, &a[k])?;
                }
                Ok(())
            }
            (Value::Array(d), Value::Array(a)) => {
                if d.len() != a.len() {
                    return Err(at(format!(
                        "{} elements, the doc shows {}",
                        a.len(),
                        d.len()
                    )));
                }
                d.iter().zip(a).try_for_each(|(d, a)| self.json(key, d, a))
            }
            (Value::Number(dn), Value::Number(an)) => {
                let kind = if INDEX_KEYS.contains(&key) {
                    Some(Kind::Index)
                } else if LEASE_KEYS.contains(&key) {
                    Some(Kind::Lease)
                } else {
                    None
                };
                match (kind, dn.as_u64(), an.as_u64()) {
                    (Some(kind), Some(dv), Some(av)) => self.bind(kind, dv, av).map_err(at),
                    _ if FREE_KEYS.contains(&key) || dn == an => Ok(()),
                    _ => Err(at(format!("{an}, the doc shows {dn}"))),
                }
            }
            (Value::String(_), Value::String(_)) if FREE_KEYS.contains(&key) => Ok(()),
            (d, a) if d == a => Ok(()),
            (d, a) => Err(at(format!("{a}, the doc shows {d}"))),
        }
    }

    /// Word for word; numbers after `token`/`lease` bound, after `since` free.
    fn text(&mut self, doc: &str, actual: &str) -> Result<(), String> {
        let d = words(doc);
        let a = words(actual);
        if d.len() != a.len() {
            return Err(format!("{} words, the doc shows {}", a.len(), d.len()));
        }
        let mut before = "";
        for (dw, aw) in d.iter().zip(&a) {
            let (dn, an) = (leading_number(dw), leading_number(aw));
            match (before, dn, an) {
                ("token", Some((dv, dr)), Some((av, ar))) if dr == ar => {
                    self.bind(Kind::Index, dv, av)?
                }
                ("lease", Some((dv, dr)), Some((av, ar))) if dr == ar => {
                    self.bind(Kind::Lease, dv, av)?
                }
                ("since", Some(_), Some(_)) => {}
                _ if dw == aw => {}
                _ => return Err(format!("{aw:?}, the doc shows {dw:?}")),
            }
            before = dw.trim_start_matches('(');
        }
        Ok(())
    }

    /// `cmd` with every bound value of the doc replaced by the cluster's.
    pub fn rewrite(&self, cmd: &str) -> String {
        let mut out = cmd.to_string();
        for key in INDEX_KEYS {
            out = replace_numbers(&out, &format!("\"{key}\": "), &self.indexes);
        }
        out = replace_numbers(&out, "token=", &self.indexes);
        out = replace_numbers(&out, "from_revision=", &self.indexes);
        for key in LEASE_KEYS {
            out = replace_numbers(&out, &format!("\"{key}\": "), &self.leases);
        }
        out
    }
}

/// Splits a trailing `  HTTP NNN` (curl's `-w`) off a line.
fn split_status(line: &str) -> (&str, Option<&str>) {
    match line.rsplit_once("  HTTP ") {
        Some((body, status)) if status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()) => {
            (body, Some(status))
        }
        _ => (line, None),
    }
}

fn event_id(s: &str) -> Result<(u64, u64), String> {
    let (rev, seq) = s.trim().split_once('.').ok_or("no '.' in the event id")?;
    let parse = |v: &str| v.parse::<u64>().map_err(|e| format!("event id {s}: {e}"));
    Ok((parse(rev)?, parse(seq)?))
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// A word's leading number and the rest (`16,` is 16 and `,`).
fn leading_number(word: &str) -> Option<(u64, &str)> {
    let end = word
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(word.len());
    Some((word[..end].parse().ok()?, &word[end..]))
}

/// Replaces the number after each `prefix` in `s` by its binding, if it has one.
fn replace_numbers(s: &str, prefix: &str, table: &HashMap<u64, u64>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        out.push_str(&rest[..i + prefix.len()]);
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        match after[..end].parse::<u64>().ok().and_then(|n| table.get(&n)) {
            Some(bound) => out.push_str(&bound.to_string()),
            None => out.push_str(&after[..end]),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Lease ids a command names (`"lease_id": N`) that nothing has bound yet.
pub fn unbound_leases(cmd: &str, b: &Bindings) -> Vec<u64> {
    let mut found = Vec::new();
    let prefix = "\"lease_id\": ";
    let mut rest = cmd;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if let Ok(n) = after[..end].parse::<u64>() {
            if !b.leases.contains_key(&n) && !found.contains(&n) {
                found.push(n);
            }
        }
        rest = &after[end..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker itself: a drifted answer fails, the same answer with other ids passes.
    #[test]
    fn a_drifted_answer_is_caught() {
        let doc = r#"{"lease_id":3,"revision":3,"ttl_ms":60000}"#;
        let mut b = Bindings::default();
        assert!(b
            .line(doc, r#"{"lease_id":7,"revision":7,"ttl_ms":60000}"#)
            .is_ok());
        // The same doc value again must be the same cluster value.
        assert!(b
            .line(doc, r#"{"lease_id":8,"revision":8,"ttl_ms":60000}"#)
            .is_err());
        let mut b = Bindings::default();
        // A renamed field, a missing one, a changed constant, a changed error code.
        for drifted in [
            r#"{"lease":7,"revision":7,"ttl_ms":60000}"#,
            r#"{"lease_id":7,"ttl_ms":60000}"#,
            r#"{"lease_id":7,"revision":7,"ttl_ms":30000}"#,
        ] {
            assert!(b.line(doc, drifted).is_err(), "{drifted}");
        }
        let doc = r#"{"code":"lock_held","message":"lock demo is held (token 6)","current_token":6}  HTTP 409"#;
        assert!(Bindings::default()
            .line(
                doc,
                r#"{"code":"lock_held","message":"x","current_token":9}  HTTP 409"#
            )
            .is_ok());
        assert!(Bindings::default()
            .line(
                doc,
                r#"{"code":"lock_held","message":"x","current_token":9}  HTTP 423"#
            )
            .is_err());
        assert!(Bindings::default()
            .line(
                doc,
                r#"{"code":"held","message":"x","current_token":9}  HTTP 409"#
            )
            .is_err());
        // Text: bound numbers after token/lease, everything else word for word.
        let doc = "primary: leader lease 5 token 16 since 41200 ms: db-1:5432";
        let mut b = Bindings::default();
        assert!(b
            .line(
                doc,
                "primary: leader lease 9 token 31 since 12 ms: db-1:5432"
            )
            .is_ok());
        assert!(b
            .line(
                doc,
                "primary: leader lease 9 token 32 since 12 ms: db-1:5432"
            )
            .is_err());
        assert!(Bindings::default()
            .line(
                doc,
                "primary: leader lease 9 token 31 since 12 ms: db-2:5432"
            )
            .is_err());
        // Commands are rewritten with the bindings.
        let mut b = Bindings::default();
        b.leases.insert(3, 41);
        b.indexes.insert(6, 44);
        assert_eq!(
            b.rewrite(r#"curl -d '{"lease_id": 3, "token": 6, "wait_ms": 0}' "$T?token=6""#),
            r#"curl -d '{"lease_id": 41, "token": 44, "wait_ms": 0}' "$T?token=44""#
        );
    }
}
