//! A real Kubernetes API server on loopback: Debian's etcd and the
//! kube-apiserver that scripts/kube-apiserver builds into target/tools, with
//! the Gateway API CRDs installed. Nothing in it names an address off this
//! machine: both listen on free 127.0.0.1 ports, the `kubernetes` Service gets
//! no endpoints (`--endpoint-reconciler-type=none`) and there is no kubelet,
//! so tests make the Services and EndpointSlices whose backends are theirs.
//! The API server refuses loopback endpoint addresses, so those backends
//! listen on `endpoint_ip()`, an address of this machine's own interface
//! (traffic to it stays on the machine, as to 127.0.0.1).
//!
//! `ApiServer::shared()` starts one per test binary, on first use, for all
//! its tests; `ApiServer::start()` one of a test's own, stopped on drop. Each
//! server process runs under a small shell that kills it when its standard
//! input closes: on drop, or when the test process ends however it ends, so
//! the shared one (a static, never dropped) goes with its test binary too.

use std::fs::File;
use std::io::Read;
use std::net::{IpAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};

use super::process::{TempDir, free_port};

/// An address of this machine that an EndpointSlice takes (not loopback,
/// not link-local): the first global-scope one of its interfaces, IPv4 when
/// there is one. Test backends listen on it.
pub fn endpoint_ip() -> IpAddr {
    static IP: OnceLock<IpAddr> = OnceLock::new();
    *IP.get_or_init(|| {
        ["-4", "-6"]
            .into_iter()
            .find_map(|family| {
                let out = Command::new("ip")
                    .args([family, "-o", "addr", "show", "scope", "global"])
                    .output()
                    .ok()?;
                String::from_utf8_lossy(&out.stdout).lines().find_map(|line| {
                    let mut words = line.split_whitespace();
                    words.find(|w| w.starts_with("inet"))?;
                    words.next()?.split('/').next()?.parse().ok()
                })
            })
            .expect("no global address on this machine's interfaces (`ip addr`): EndpointSlices refuse loopback ones")
    })
}

/// The workspace's root (the controller crate's parent).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the harness runs, each a path that must exist; a test fails, naming
/// the missing one, when it does not.
struct Tools {
    etcd: PathBuf,
    apiserver: PathBuf,
    crds: PathBuf,
}

impl Tools {
    fn find() -> Tools {
        let tools = root().join("target/tools");
        let found = Tools {
            etcd: ["/usr/bin/etcd", "/usr/local/bin/etcd"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
                .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd")),
            apiserver: tools.join("kube-apiserver"),
            crds: tools.join("gateway-api-crds"),
        };
        for path in [&found.etcd, &found.apiserver, &found.crds] {
            assert!(
                path.exists(),
                "{} is missing: run scripts/test (it installs Debian's etcd-server and \
                 builds kube-apiserver and fetches the Gateway API CRDs with \
                 scripts/kube-apiserver)",
                path.display()
            );
        }
        found
    }
}

/// A server process under `sh`, which kills it (SIGKILL: the state is
/// scratch) when the pipe on its standard input closes, and exits when it
/// exits; `cleanup` is removed after.
struct Bound {
    shell: Child,
    stdin: Option<ChildStdin>,
    name: &'static str,
    log: PathBuf,
}

/// Runs "$@" with its standard input elsewhere and fd 3 closed; a
/// background reader of the pipe (fd 3) kills it at end of file.
const WRAPPER: &str = r#"cleanup=$1; shift
exec 3<&0 0</dev/null
"$@" 3<&- &
server=$!
{ read -r _ <&3; kill -KILL "$server" 2>/dev/null; } &
wait "$server"
status=$?
[ -n "$cleanup" ] && rm -rf "$cleanup"
exit $status"#;

impl Bound {
    fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: PathBuf,
        cleanup: Option<&Path>,
    ) -> Bound {
        let out = File::create(&log).unwrap();
        let mut shell = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .arg(cleanup.map(Path::as_os_str).unwrap_or_default())
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdin = shell.stdin.take();
        Bound {
            shell,
            stdin,
            name,
            log,
        }
    }

    /// The last lines of its log (which goes with the server's folder).
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Panic, showing its log, when it has exited.
    fn check_running(&mut self) {
        if let Ok(Some(status)) = self.shell.try_wait() {
            panic!(
                "{} exited ({status}) while starting; its log ends:\n{}",
                self.name,
                self.log_tail()
            );
        }
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.shell.wait();
    }
}

/// An API server and its etcd, with a kubeconfig that reaches it as a
/// cluster administrator.
pub struct ApiServer {
    // Field order is drop order: the API server before its etcd, both
    // before their folder.
    apiserver: Bound,
    etcd: Bound,
    config: kube::Config,
    kubeconfig: PathBuf,
    url: String,
    /// From nothing to ready with the CRDs established.
    pub started_in: Duration,
    dir: TempDir,
}

/// A folder in memory when there is one: etcd syncs each write.
fn scratch_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl ApiServer {
    /// The test binary's server, started by the first test that asks.
    pub fn shared() -> &'static ApiServer {
        static SHARED: OnceLock<ApiServer> = OnceLock::new();
        SHARED.get_or_init(ApiServer::start)
    }

    /// A server of the caller's own, stopped on drop.
    pub fn start() -> ApiServer {
        // The start drives a client of its own: on a thread of its own, so
        // that it can be called from a test's runtime or from none.
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(ApiServer::launch())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// A client of the server on the caller's runtime (a client's I/O runs
    /// on the runtime that made it).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config.clone()).unwrap()
    }

    /// A kubeconfig file naming the server, its CA and an administrator's
    /// token (what `vireo-controller --kubeconfig PATH` reads).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn launch() -> ApiServer {
        let begin = Instant::now();
        let tools = Tools::find();
        let dir = TempDir::new_in(&scratch_base(), "apiserver");

        let client_port = free_port();
        let peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd = Bound::spawn(
            "etcd",
            &tools.etcd,
            &[
                "--name=test".into(),
                format!("--data-dir={}", dir.path().join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=test={peer_url}"),
                "--logger=zap".into(),
                "--log-level=warn".into(),
            ],
            dir.path().join("etcd.log"),
            Some(dir.path()),
        );
        wait_for(&mut etcd, Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", client_port)).is_ok()
        })
        .await;

        let files = Files::write(&dir);
        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let path = |p: &PathBuf| p.display().to_string();
        let mut apiserver = Bound::spawn(
            "kube-apiserver",
            &tools.apiserver,
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                "--endpoint-reconciler-type=none".into(),
                format!("--tls-cert-file={}", path(&files.serving_cert)),
                format!("--tls-private-key-file={}", path(&files.serving_key)),
                format!("--service-account-key-file={}", path(&files.sa_public)),
                format!(
                    "--service-account-signing-key-file={}",
                    path(&files.sa_private)
                ),
                format!("--service-account-issuer={url}"),
                format!("--token-auth-file={}", path(&files.tokens)),
                "--authorization-mode=AlwaysAllow".into(),
                "--service-cluster-ip-range=10.0.0.0/16".into(),
                "--profiling=false".into(),
            ],
            dir.path().join("kube-apiserver.log"),
            None,
        );

        let kubeconfig = dir.write(
            "kubeconfig",
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {url}
    certificate-authority: {ca}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
",
                ca = path(&files.ca),
                token = files.token,
            ),
        );
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig).unwrap(),
            &KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config.clone()).unwrap();

        // The CRDs go in as soon as the server takes them, while it still
        // makes its built-in priority classes (a hook that polls each second).
        let deadline = Instant::now() + Duration::from_secs(60);
        let early = "/readyz?exclude=poststarthook/scheduling/bootstrap-system-priority-classes";
        for check in [early, "/readyz"] {
            ready(&client, &mut apiserver, check, deadline).await;
            if check == early {
                create_crds(&client, &tools.crds).await;
            }
        }
        crds_established(&client).await;
        ApiServer {
            apiserver,
            etcd,
            config,
            kubeconfig,
            url,
            started_in: begin.elapsed(),
            dir,
        }
    }
}

/// Poll `ready` every 50 ms until it holds, failing when `server` exits or
/// `limit` passes.
async fn wait_for(server: &mut Bound, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        server.check_running();
        assert!(
            Instant::now() < deadline,
            "{} not ready in {limit:?}; its log ends:\n{}",
            server.name,
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll the API server's health check `path` every 100 ms until it answers
/// "ok", failing when the server exits or at `deadline`.
async fn ready(client: &kube::Client, server: &mut Bound, path: &str, deadline: Instant) {
    loop {
        server.check_running();
        let answer = client
            .request_text(http::Request::get(path).body(Vec::new()).unwrap())
            .await;
        if answer.as_ref().is_ok_and(|body| body == "ok") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kube-apiserver not ready ({path}): {answer:?}; its log ends:\n{}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The API server's certificates, keys and token file.
struct Files {
    ca: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    sa_public: PathBuf,
    sa_private: PathBuf,
    tokens: PathBuf,
    token: String,
}

impl Files {
    fn write(dir: &TempDir) -> Files {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca = CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "vireo test cluster CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let serving_key = KeyPair::generate().unwrap();
        let serving = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap()
            .signed_by(&serving_key, &ca)
            .unwrap();
        // The service-account token signing key (ES256).
        let sa = KeyPair::generate().unwrap();
        let mut random = [0u8; 16];
        File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut random))
            .unwrap();
        let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
        Files {
            ca: dir.write("ca.crt", ca.pem()),
            serving_cert: dir.write("serving.crt", serving.pem()),
            serving_key: dir.write("serving.key", serving_key.serialize_pem()),
            sa_public: dir.write("sa.pub", sa.public_key_pem()),
            sa_private: dir.write("sa.key", sa.serialize_pem()),
            tokens: dir.write(
                "tokens.csv",
                format!("{token},admin,admin,\"system:masters\"\n"),
            ),
            token,
        }
    }
}

/// Create every CRD in `dir`'s YAML files.
async fn create_crds(client: &kube::Client, dir: &Path) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        crds.extend(
            serde_saphyr::from_multiple::<CustomResourceDefinition>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display())),
        );
    }
    let pp = PostParams::default();
    futures::future::try_join_all(crds.iter().map(|crd| api.create(&pp, crd)))
        .await
        .unwrap();
}

/// Wait until every CRD is established, and past the two seconds after
/// during which the server holds each create of its kind for two seconds (a
/// guard for servers that have not all seen it yet): a test measuring its
/// controller's latency should not see that.
async fn crds_established(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut established = Vec::new();
    for crd in api.list(&ListParams::default()).await.unwrap() {
        let name = crd.metadata.name.unwrap();
        let crd = tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not established in 30 s"))
        .unwrap()
        .unwrap();
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        let since = conditions
            .into_iter()
            .find(|c| c.type_ == "Established")
            .and_then(|c| c.last_transition_time)
            .unwrap();
        established.push(since.0);
    }
    if let Some(last) = established.into_iter().max() {
        let holds_until = std::time::SystemTime::from(last) + Duration::from_secs(2);
        if let Ok(wait) = holds_until.duration_since(std::time::SystemTime::now()) {
            tokio::time::sleep(wait).await;
        }
    }
}
