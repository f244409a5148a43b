//! Input checks for the client API, against the named limits in `turnstile_core::limits`.
//! Everything is checked before proposing, so bad input never reaches the log.

use turnstile_core::limits;

use crate::error::ApiError;

fn bad(msg: String) -> ApiError {
    ApiError::BadRequest(msg)
}

/// Lock and counter names: 1..=max bytes of `[A-Za-z0-9._:-]`, safe in a URL path segment.
pub fn name(what: &str, s: &str, max: usize) -> Result<(), ApiError> {
    if s.is_empty() || s.len() > max {
        return Err(bad(format!("{what} must be 1..={max} bytes")));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(bad(format!(
            "{what} may contain only letters, digits and . _ : -"
        )));
    }
    Ok(())
}

pub fn lock_name(s: &str) -> Result<(), ApiError> {
    name("lock name", s, limits::LOCK_NAME_BYTES_MAX)
}

pub fn counter_name(s: &str) -> Result<(), ApiError> {
    name("counter name", s, limits::COUNTER_NAME_BYTES_MAX)
}

/// Keys: 1..=max bytes of UTF-8 without control characters.
pub fn key(s: &str) -> Result<(), ApiError> {
    if s.is_empty() || s.len() > limits::KEY_BYTES_MAX {
        return Err(bad(format!(
            "key must be 1..={} bytes",
            limits::KEY_BYTES_MAX
        )));
    }
    if s.chars().any(char::is_control) {
        return Err(bad("key may not contain control characters".into()));
    }
    Ok(())
}

pub fn value(s: &str) -> Result<(), ApiError> {
    if s.len() > limits::VALUE_BYTES_MAX {
        return Err(bad(format!(
            "value must be at most {} bytes",
            limits::VALUE_BYTES_MAX
        )));
    }
    Ok(())
}

pub fn ttl_ms(ttl: u64) -> Result<(), ApiError> {
    if !(limits::TTL_MS_MIN..=limits::TTL_MS_MAX).contains(&ttl) {
        return Err(bad(format!(
            "ttl_ms must be within {}..={}",
            limits::TTL_MS_MIN,
            limits::TTL_MS_MAX
        )));
    }
    Ok(())
}

/// Request ids: 1..=max bytes of printable ASCII.
pub fn request_id(id: Option<&str>) -> Result<(), ApiError> {
    let Some(id) = id else { return Ok(()) };
    if id.is_empty()
        || id.len() > limits::REQUEST_ID_BYTES_MAX
        || !id.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(bad(format!(
            "request_id must be 1..={} printable ASCII bytes",
            limits::REQUEST_ID_BYTES_MAX
        )));
    }
    Ok(())
}

pub fn positive_id(what: &str, id: u64) -> Result<(), ApiError> {
    if id == 0 {
        return Err(bad(format!("{what} must be positive")));
    }
    Ok(())
}

pub fn counter_step(by: i64) -> Result<(), ApiError> {
    if by.unsigned_abs() > limits::COUNTER_STEP_ABS_MAX.unsigned_abs() {
        return Err(bad(format!(
            "by must be within ±{}",
            limits::COUNTER_STEP_ABS_MAX
        )));
    }
    Ok(())
}
