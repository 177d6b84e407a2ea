//! One SCRAM exchange of MQTT v5 enhanced authentication (`SCRAM-SHA-256`/`-512`), on the
//! hook's snapshot of credentials: the user name it proves must be the one the client sent.

use super::Inner;
use hayate_auth::{ScramCredentials, ScramError, ScramServer, ScramStep};
use hayate_codec::ReasonCode;
use hayate_core::{AuthStep, Authenticated, ClientInfo, EnhancedAuth};
use std::fmt;
use std::sync::Arc;

pub(super) type CredentialLookup = Box<dyn FnOnce(&str) -> Option<ScramCredentials> + Send>;

/// One SCRAM exchange (CONNECT or re-authentication).
pub(super) struct ScramExchange {
    pub(super) server: ScramServer<CredentialLookup>,
    pub(super) inner: Arc<Inner>,
    pub(super) client: ClientInfo,
}

impl fmt::Debug for ScramExchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramExchange")
            .field("server", &self.server)
            .field("client_id", &self.client.client_id)
            .finish()
    }
}

impl EnhancedAuth for ScramExchange {
    fn step(&mut self, data: &[u8]) -> AuthStep {
        let username = self.client.username.as_deref();
        match self.server.step(data) {
            Ok(ScramStep::Continue(server_first)) => AuthStep::Continue(server_first),
            Ok(ScramStep::Success {
                server_final,
                username: proved,
            }) => {
                if username.is_some_and(|sent| sent != proved) {
                    // CONNECT's user name (or, re-authenticating, the session's) must be the
                    // one the exchange proved.
                    let code = self.inner.failed_with(
                        &self.client,
                        username,
                        "scram_user_mismatch",
                        ReasonCode::NOT_AUTHORIZED,
                    );
                    return AuthStep::Fail(code);
                }
                self.inner.succeeded(&self.client);
                AuthStep::Success(
                    Some(server_final),
                    Authenticated {
                        username: Some(proved.into()),
                        grant: None,
                    },
                )
            }
            Err(error) => AuthStep::Fail(self.inner.failed_with(
                &self.client,
                username,
                scram_reason(&error),
                ReasonCode::NOT_AUTHORIZED,
            )),
        }
    }
}

fn scram_reason(error: &ScramError) -> &'static str {
    match error {
        ScramError::InvalidProof => "scram_bad_proof",
        ScramError::NonceMismatch => "scram_nonce_mismatch",
        ScramError::ChannelBindingNotSupported | ScramError::ChannelBindingMismatch => {
            "scram_channel_binding"
        }
        _ => "scram_malformed",
    }
}
