//! `--web.config.file`: TLS and basic auth, in the web configuration file
//! format the Prometheus exporters share (prometheus/exporter-toolkit,
//! docs/web-configuration.md), so that one file serves node_exporter and
//! vtrace alike:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # paths relative to this file
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
//!   client_ca_file: ca.crt
//!   min_version: TLS12           # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! A key vtrace does not implement (cipher_suites, http_server_config, ...)
//! is an error naming it, not silently ignored.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use serde::Deserialize;

use crate::{Error, Result};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsServerConfig>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_auth_type: Option<String>,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: Option<String>,
}

/// What a web configuration file asks for.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub users: BasicAuth,
}

impl WebConfig {
    /// Reads and checks `path`: certificates and keys loaded, bcrypt hashes parsed.
    pub fn load(path: &Path) -> Result<WebConfig> {
        let bad = |why: String| Error::BadArgument(format!("--web.config.file {}: {why}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_saphyr::from_str(&text).map_err(|e| bad(format!("{e} (vtrace implements tls_server_config's cert_file, key_file, client_auth_type, client_ca_file and min_version, and basic_auth_users)")))?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .map(|t| tls_config(&t, dir))
            .transpose()
            .map_err(bad)?;
        for (user, hash) in &file.basic_auth_users {
            hash.parse::<bcrypt::HashParts>()
                .map_err(|e| bad(format!("basic_auth_users.{user}: not a bcrypt hash ({e})")))?;
        }
        Ok(WebConfig {
            tls: tls.map(Arc::new),
            users: BasicAuth {
                users: file.basic_auth_users,
                verified: Mutex::new(HashMap::new()),
            },
        })
    }
}

fn tls_config(t: &TlsServerConfig, dir: &Path) -> std::result::Result<rustls::ServerConfig, String> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let at = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { dir.join(p) };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(at(&t.cert_file))
        .and_then(|i| i.collect())
        .map_err(|e| format!("cert_file {}: {e}", t.cert_file.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(at(&t.key_file)).map_err(|e| format!("key_file {}: {e}", t.key_file.display()))?;
    let versions: &[&rustls::SupportedProtocolVersion] = match t.min_version.as_deref() {
        None | Some("TLS12") => &[&rustls::version::TLS13, &rustls::version::TLS12],
        Some("TLS13") => &[&rustls::version::TLS13],
        Some(v) => return Err(format!("min_version {v}: vtrace serves TLS12 or TLS13")),
    };
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?;
    let client_auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let builder = match client_auth {
        "NoClientCert" => builder.with_no_client_auth(),
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let ca = t
                .client_ca_file
                .as_ref()
                .ok_or_else(|| format!("client_auth_type {client_auth} needs client_ca_file"))?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(at(ca)).map_err(|e| format!("client_ca_file: {e}"))? {
                roots
                    .add(cert.map_err(|e| format!("client_ca_file: {e}"))?)
                    .map_err(|e| format!("client_ca_file: {e}"))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            );
            let verifier = if client_auth == "VerifyClientCertIfGiven" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("client_ca_file: {e}"))?)
        }
        other => {
            return Err(format!(
                "client_auth_type {other}: vtrace implements NoClientCert, RequireAndVerifyClientCert and \
                 VerifyClientCertIfGiven"
            ));
        }
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file: {e}"))
}

/// `basic_auth_users`: user -> bcrypt hash. A bcrypt check costs tens of
/// milliseconds by design; a scraper sends the same credentials every
/// scrape, so a pair once verified is remembered (as exporter-toolkit does).
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    verified: Mutex<HashMap<(String, String), bool>>,
}

/// Remembered (user, password) pairs at most: a client guessing passwords
/// cannot grow the cache without bound.
const REMEMBERED: usize = 64;

impl BasicAuth {
    pub fn none() -> BasicAuth {
        BasicAuth {
            users: BTreeMap::new(),
            verified: Mutex::new(HashMap::new()),
        }
    }

    pub fn required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether an `Authorization` header's value lets the request in.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        if !self.required() {
            return true;
        }
        use base64::Engine;
        let Some(encoded) = authorization.and_then(|a| a.strip_prefix("Basic ")) else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let Some((user, password)) = String::from_utf8_lossy(&decoded)
            .split_once(':')
            .map(|(u, p)| (u.to_string(), p.to_string()))
        else {
            return false;
        };
        let Some(hash) = self.users.get(&user) else {
            return false;
        };
        let key = (user, password);
        if let Some(ok) = self.verified.lock().ok().and_then(|v| v.get(&key).copied()) {
            return ok;
        }
        let ok = bcrypt::verify(&key.1, hash).unwrap_or(false);
        if let Ok(mut v) = self.verified.lock() {
            if v.len() >= REMEMBERED {
                v.clear();
            }
            v.insert(key, ok);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_vtrace_does_not_implement_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("vtrace-webcfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("web.yml");
        std::fs::write(&path, "http_server_config:\n  http2: false\n").unwrap();
        let err = WebConfig::load(&path).err().expect("refused").to_string();
        assert!(err.contains("http_server_config") && err.contains("web.yml"), "{err}");
        std::fs::write(&path, "basic_auth_users:\n  alice: notahash\n").unwrap();
        let err = WebConfig::load(&path).err().expect("refused").to_string();
        assert!(err.contains("alice") && err.contains("bcrypt"), "{err}");
        // bcrypt of "secret", cost 4.
        let hash = bcrypt::hash("secret", 4).unwrap();
        std::fs::write(&path, format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
        let web = WebConfig::load(&path).unwrap();
        use base64::Engine;
        let header = |u: &str, p: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        };
        assert!(web.users.allows(Some(&header("alice", "secret"))));
        assert!(web.users.allows(Some(&header("alice", "secret"))), "remembered");
        assert!(!web.users.allows(Some(&header("alice", "wrong"))));
        assert!(!web.users.allows(Some(&header("bob", "secret"))));
        assert!(!web.users.allows(None));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
