//! Authentication of the metrics and admin endpoints: a bearer token, or HTTP Basic with a
//! user of a Mosquitto-compatible password file, or either when both are configured.

use crate::{Access, AppState};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use std::sync::Arc;

/// Lets the request through when it carries the configured bearer token or a valid user name
/// and password (or access is anonymous); otherwise 401 with a `WWW-Authenticate` header for
/// each accepted scheme.
pub(crate) async fn require_credentials(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let Access::Credentials { token, passwords } = &state.access else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .map(|(scheme, value)| (scheme.to_ascii_lowercase(), value.trim().to_string()));
    let allowed = match (presented, token, passwords) {
        (Some((scheme, value)), Some(token), _) if scheme == "bearer" => {
            constant_time_eq(value.as_bytes(), token.as_bytes())
        }
        (Some((scheme, value)), _, Some(passwords)) if scheme == "basic" => {
            match basic_credentials(&value) {
                Some((user, password)) => {
                    // A password hash costs milliseconds (argon2id more): off the workers.
                    let passwords = passwords.clone();
                    tokio::task::spawn_blocking(move || {
                        passwords.verify(&user, password.as_bytes())
                    })
                    .await
                    .unwrap_or(false)
                }
                None => false,
            }
        }
        _ => false,
    };
    if allowed {
        return next.run(request).await;
    }
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(serde_json::json!({"error": "valid credentials are required"})),
    )
        .into_response();
    let headers = response.headers_mut();
    if token.is_some() {
        headers.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"hayate\""),
        );
    }
    if passwords.is_some() {
        headers.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"hayate\", charset=\"UTF-8\""),
        );
    }
    response
}

/// `base64(user:password)` of an `Authorization: Basic` header (RFC 7617).
fn basic_credentials(value: &str) -> Option<(String, String)> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(value)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// Compares without stopping at the first difference (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn constant_time_eq() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"abcd"));
        assert!(super::constant_time_eq(b"", b""));
    }

    #[test]
    fn basic_credentials() {
        // "admin:pa:ss" — the password may contain colons, the user name may not.
        assert_eq!(
            super::basic_credentials("YWRtaW46cGE6c3M="),
            Some(("admin".into(), "pa:ss".into()))
        );
        assert_eq!(super::basic_credentials("bm9jb2xvbg=="), None, "no colon");
        assert_eq!(super::basic_credentials("!!!"), None, "not base64");
    }
}
