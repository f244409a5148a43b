//! `SseBuffer`: splits a server-sent-event byte stream (Turnstile's `/v1/watch`) into the
//! `data` payloads of complete events, across chunk boundaries.

/// Bytes of an unfinished event kept at most; a stream past it is not an SSE stream.
pub const EVENT_BYTES_MAX: usize = 1 << 20;

/// Accumulates chunks and yields complete events' data.
#[derive(Default)]
pub struct SseBuffer {
    buf: Vec<u8>,
}

impl SseBuffer {
    /// Adds a chunk; returns the data of every event it completed (comments and events without
    /// data yield nothing). `None` if an event grows past [`EVENT_BYTES_MAX`].
    pub fn push(&mut self, chunk: &[u8]) -> Option<Vec<String>> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = find(&self.buf, b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            if let Some(data) = event_data(&event[..end]) {
                out.push(data);
            }
        }
        (self.buf.len() <= EVENT_BYTES_MAX).then_some(out)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Joins the `data:` lines of one event (without the blank line ending it).
fn event_data(event: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(event);
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks() {
        let mut b = SseBuffer::default();
        assert_eq!(
            b.push(b"id: 5.0\nevent: put\nda").expect("small"),
            Vec::<String>::new()
        );
        assert_eq!(
            b.push(b"ta: {\"a\":1}\n\n: keep-alive\n\nid: 6.0\ndata: x\n\n")
                .expect("small"),
            vec!["{\"a\":1}".to_string(), "x".to_string()]
        );
    }

    #[test]
    fn multi_line_data_and_crlf() {
        let mut b = SseBuffer::default();
        assert_eq!(
            b.push(b"data: a\r\ndata: b\r\n\n").expect("small"),
            vec!["a\nb".to_string()]
        );
    }

    #[test]
    fn runaway_event_is_refused() {
        let mut b = SseBuffer::default();
        assert!(b.push(&vec![b'x'; EVENT_BYTES_MAX + 1]).is_none());
    }
}
