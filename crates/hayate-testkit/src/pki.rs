//! Test certificates: a CA of its own, a server certificate for `localhost` and `127.0.0.1`
//! (or other names), and a client certificate, written as PEM files readable by everyone (a
//! Mosquitto started as root reads them as its own user).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use std::path::{Path, PathBuf};

/// PEM files of a test PKI.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// CA certificate.
    pub ca: PathBuf,
    /// Server certificate, signed by the CA.
    pub server_cert: PathBuf,
    /// Server key.
    pub server_key: PathBuf,
    /// Client certificate, signed by the CA.
    pub client_cert: PathBuf,
    /// Client key.
    pub client_key: PathBuf,
}

/// A PKI in `dir` whose server certificate names `localhost` and `127.0.0.1`.
pub fn make_pki(dir: &Path) -> TestPki {
    make_pki_for(dir, &["localhost", "127.0.0.1"])
}

/// A PKI in `dir` whose server certificate names `server_names` (DNS names or IP addresses).
pub fn make_pki_for(dir: &Path, server_names: &[&str]) -> TestPki {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A name of its own per CA: another test CA is an unknown issuer, not a bad signature.
    let ca_name = format!(
        "hayate test CA {}",
        dir.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    );
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, cn: &str| {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &issuer).expect("certificate");
        (cert.pem(), key.serialize_pem())
    };
    let names: Vec<String> = server_names.iter().map(|n| n.to_string()).collect();
    let (server_cert, server_key) = leaf(names, server_names.first().unwrap_or(&"server"));
    let (client_cert, client_key) = leaf(vec!["test-client".into()], "test-client");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write PEM");
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
        path
    };
    let _ = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
    };
    TestPki {
        ca: write("ca.pem", &ca_cert.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client.key", &client_key),
    }
}

/// A CA and one certificate per cluster node, for TLS on node links.
#[derive(Debug, Clone)]
pub struct NodePki {
    /// CA certificate.
    pub ca: PathBuf,
    /// Per node, in the order asked: its certificate and its key.
    pub nodes: Vec<(PathBuf, PathBuf)>,
}

/// A CA named `ca_name` in `dir` and a certificate signed by it for each of `nodes` (common
/// name the node's, subjectAltName the IP `ip` and the DNS name `NODE.cluster.test`, usable
/// as server and as client), files `ca_name.pem`, `ca_name-NODE.pem`, `ca_name-NODE.key`.
pub fn make_node_pki(dir: &Path, ca_name: &str, nodes: &[&str], ip: &str) -> NodePki {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        DnType::CommonName,
        format!("hayate test cluster CA {ca_name}"),
    );
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let write = |name: String, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write PEM");
        path
    };
    let certs = nodes
        .iter()
        .map(|node| {
            let key = KeyPair::generate().expect("key");
            let names = vec![ip.to_string(), format!("{node}.cluster.test")];
            let mut params = CertificateParams::new(names).expect("params");
            params.distinguished_name.push(DnType::CommonName, *node);
            params.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = params.signed_by(&key, &issuer).expect("certificate");
            (
                write(format!("{ca_name}-{node}.pem"), &cert.pem()),
                write(format!("{ca_name}-{node}.key"), &key.serialize_pem()),
            )
        })
        .collect();
    NodePki {
        ca: write(format!("{ca_name}.pem"), &ca_cert.pem()),
        nodes: certs,
    }
}
