//! `GET /ui`: the dashboard, three files built into the binary (`crates/turnstile-server/ui/`).
//!
//! The page is served to anyone, like `/healthz`: it holds no data. What it shows it reads from
//! this node's client API in the browser, with the operator's credential when authentication is
//! on, so it can show nothing a client with that credential could not read itself.
//!
//! Lock names, keys and values are other tenants' input, so a name crafted as markup must never
//! run as script in an operator's browser (where a token may sit in session storage). The
//! script writes them only as text, and the Content-Security-Policy below forbids inline script
//! and every origin but this node's, so even a slip in the script could not load or run
//! anything foreign.

use axum::http::header;
use axum::response::IntoResponse;

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const APP_CSS: &str = include_str!("../../ui/app.css");

/// Script, styles and API calls from this node only; no inline script, no framing, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            // Small, and must match the binary that serves the API: always revalidate.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// The dashboard (no credential needed to load it; its reads use the operator's).
#[utoipa::path(get, path = "/ui", tag = "cluster", security(()),
    responses((status = 200, description = "The dashboard page", content_type = "text/html",
        body = String)))]
pub async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// The dashboard's script.
#[utoipa::path(get, path = "/ui/app.js", tag = "cluster", security(()),
    responses((status = 200, description = "The dashboard's script",
        content_type = "text/javascript", body = String)))]
pub async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// The dashboard's stylesheet.
#[utoipa::path(get, path = "/ui/app.css", tag = "cluster", security(()),
    responses((status = 200, description = "The dashboard's stylesheet",
        content_type = "text/css", body = String)))]
pub async fn stylesheet() -> impl IntoResponse {
    asset("text/css; charset=utf-8", APP_CSS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page loads only its own two files, and neither script nor page carries inline
    /// script or a foreign origin, which the CSP would block anyway (and break the page).
    #[test]
    fn the_page_loads_only_its_own_files() {
        for needle in ["src=\"/ui/app.js\"", "href=\"/ui/app.css\""] {
            assert!(INDEX_HTML.contains(needle), "{needle}");
        }
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
        ] {
            for foreign in [
                "http://",
                "https://",
                "//cdn",
                "onclick=",
                "onload=",
                "javascript:",
            ] {
                assert!(!text.contains(foreign), "{name} contains {foreign}");
            }
        }
        assert_eq!(
            INDEX_HTML.matches("<script").count(),
            1,
            "one external script only"
        );
        // The script never writes markup built from data.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
    }
}
