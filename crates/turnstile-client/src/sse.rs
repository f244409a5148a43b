//! A server-sent events parser (the WHATWG `text/event-stream` format), fed raw bytes as they
//! arrive and yielding whole events. Only what Turnstile's watch needs: `id`, `event` and
//! `data` fields; comments and `retry` are ignored. Pure, so it is tested without a socket.

/// Longest line accepted, in bytes: a watch event carries at most one 64 KiB value, escaped.
pub(crate) const SSE_LINE_BYTES_MAX: usize = 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub id: Option<String>,
    /// `message` when the stream named none.
    pub event: String,
    /// `data` lines joined with `\n`.
    pub data: String,
}

/// Incremental parser state.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events completed by them, or an error for an overlong line.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if let Some(ev) = self.line_done(&String::from_utf8_lossy(&line)) {
                    out.push(ev);
                }
            } else {
                if self.line.len() >= SSE_LINE_BYTES_MAX {
                    return Err(format!("event stream line over {SSE_LINE_BYTES_MAX} bytes"));
                }
                self.line.push(b);
            }
        }
        Ok(out)
    }

    fn line_done(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "id" => self.id = Some(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
        None
    }

    /// A blank line ends an event; one without data is dropped (as browsers do).
    fn dispatch(&mut self) -> Option<SseEvent> {
        let id = self.id.take();
        let event = self.event.take();
        let data = self.data.take()?;
        Some(SseEvent {
            id,
            event: event.unwrap_or_else(|| "message".into()),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(chunks: &[&str]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.push(c.as_bytes()).unwrap_or_default());
        }
        out
    }

    #[test]
    fn parses_events_split_across_chunks() {
        let evs = feed(&[
            ": keepalive\n\nid: 7.0\nev",
            "ent: put\r\ndata: {\"a\":\n",
            "data: 1}\n\nid:8.1\nevent:delete\ndata:x\n\n",
        ]);
        assert_eq!(
            evs,
            vec![
                SseEvent {
                    id: Some("7.0".into()),
                    event: "put".into(),
                    data: "{\"a\":\n1}".into()
                },
                SseEvent {
                    id: Some("8.1".into()),
                    event: "delete".into(),
                    data: "x".into()
                },
            ]
        );
    }

    #[test]
    fn event_without_data_or_terminator_is_not_dispatched() {
        assert!(feed(&["id: 1.0\nevent: put\n\n", "data: half"]).is_empty());
        let evs = feed(&["data: plain\n\n"]);
        assert_eq!(evs[0].event, "message");
        assert_eq!(evs[0].id, None);
    }

    #[test]
    fn overlong_line_is_an_error() {
        let mut p = SseParser::default();
        let long = vec![b'a'; SSE_LINE_BYTES_MAX + 1];
        assert!(p.push(&long).is_err());
    }
}
