//! The controller end to end: the controller binary (target/PROFILE/vireo-controller)
//! against the real API server of `apiserver`, writing the configuration of a real vireo
//! it reloads ([`Edge`]), requests through that vireo to backends (another vireo,
//! [`Backends`]). Shared by controller/tests/ingress.rs and controller/tests/gateway.rs.
//!
//! The API server refuses loopback addresses in EndpointSlices, so each test runs in a
//! network namespace of its own ([`isolated`]: `unshare --net`, as root) whose only
//! interface is its loopback, given the address `BACKEND_IP` besides 127.0.0.1: the
//! backends listen there, and nothing leaves the namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::apiserver::ApiServer;
use super::process::{Daemon, TempDir, free_port};

/// The backends' address, on the namespace's loopback interface (RFC 2544's benchmarking
/// range, routed nowhere).
pub const BACKEND_IP: &str = "198.18.0.1";

/// Set in the re-executed test that runs inside the namespace.
const INSIDE: &str = "VIREO_CONTROLLER_TEST_NETNS";

/// Runs the test `name` in a network namespace of its own: re-executes this test binary
/// for that test alone under `unshare --net`, with the loopback up and holding
/// `BACKEND_IP`, and checks that it passed. Inside, runs `body`.
pub fn isolated<F: std::future::Future<Output = ()>>(name: &str, body: impl FnOnce() -> F) {
    if std::env::var_os(INSIDE).is_some() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        return rt.block_on(body());
    }
    let setup =
        format!("ip link set lo up && ip addr add {BACKEND_IP}/32 dev lo && exec \"$0\" \"$@\"");
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &setup])
        .arg(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .output()
        .expect("unshare runs (util-linux; root)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{text}");
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} in its network namespace:\n{text}"
    );
}

/// The binaries of the workspace's build: target/PROFILE/{vireo,vireo-controller}.
pub fn bin(name: &str) -> PathBuf {
    let controller = PathBuf::from(env!("CARGO_BIN_EXE_vireo-controller"));
    let path = controller.with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace (cargo build --workspace)",
        path.display()
    );
    path
}

pub fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// Polls `f` every 50 ms for up to `secs` seconds.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Backends on BACKEND_IP, each a server of one vireo answering `NAME URI` (and the
/// X-User header it got) with the fields `X-Backend: NAME`, `X-Internal: 1` and
/// `X-Seen-Host` (the Host it got), and logging each request as `METHOD URI HOST` in
/// `logs/NAME.log` ([`Backends::requests`]); a URI holding `/slow` is answered
/// `NAME slow` after a second (the backend's own wait on a peer that never answers);
/// `auth` answers 200 with `X-User: alice` to `X-Token: good`, else 401.
pub struct Backends {
    ports: BTreeMap<&'static str, u16>,
    _vireo: Daemon,
    /// The peer that never answers: connections wait in its backlog.
    _silent: std::net::TcpListener,
    dir: TempDir,
}

impl Backends {
    pub fn start(names: &[&'static str]) -> Backends {
        let dir = TempDir::new("backends");
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let mut ports = BTreeMap::new();
        let mut servers = String::new();
        let silent = std::net::TcpListener::bind((BACKEND_IP, 0)).unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        for name in names {
            let port = free_port();
            ports.insert(*name, port);
            let body = if *name == "auth" {
                "if ($http_x_token = good) { add_header X-User alice; return 200; } return 401;"
                    .to_string()
            } else {
                format!(
                    "add_header X-Backend {name}; add_header X-Internal 1; \
                     add_header X-Seen-Host $http_host; \
                     return 200 \"{name} $request_uri user=$http_x_user\\n\";"
                )
            };
            servers.push_str(&format!(
                "server {{ listen {BACKEND_IP}:{port}; access_log logs/{name}.log seen; \
                 location / {{ {body} }} \
                 location ~ /slow {{ proxy_pass http://{BACKEND_IP}:{silent_port}; \
                 proxy_read_timeout 1s; error_page 504 = @slow; }} \
                 location @slow {{ return 200 \"{name} slow\\n\"; }} }}\n"
            ));
        }
        let conf = dir.write(
            "vireo.conf",
            format!(
                "events {{}}\nhttp {{\nlog_format seen '$request_method $request_uri $http_host';\n\
                 {servers}}}\n"
            ),
        );
        let child = Command::new(bin("vireo"))
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let b = Backends {
            ports,
            _vireo: Daemon(child),
            _silent: silent,
            dir,
        };
        for port in b.ports.values() {
            assert!(eventually(10, || std::net::TcpStream::connect((
                BACKEND_IP, *port
            ))
            .is_ok()));
        }
        b
    }
    pub fn port(&self, name: &str) -> u16 {
        self.ports[name]
    }

    /// The requests backend `name` has answered, as `METHOD URI HOST`, oldest first.
    pub fn requests(&self, name: &str) -> Vec<String> {
        let log = self.dir.read(&format!("logs/{name}.log"));
        log.lines().map(str::to_string).collect()
    }
}

/// A controller (serving one namespace, or all) and the vireo it drives.
pub struct Edge {
    pub http: u16,
    pub https: u16,
    pub dir: TempDir,
    pub vireo: Option<Daemon>,
    pub controller: Daemon,
}

impl Edge {
    /// A controller serving `namespace`.
    pub fn start(server: &ApiServer, namespace: &str, extra: &[&str]) -> Edge {
        Edge::launch(server, &["--namespace", namespace], extra)
    }

    /// A controller serving every namespace.
    pub fn cluster_wide(server: &ApiServer, extra: &[&str]) -> Edge {
        Edge::launch(server, &[], extra)
    }

    fn launch(server: &ApiServer, scope: &[&str], extra: &[&str]) -> Edge {
        let dir = TempDir::new("edge");
        let (http, https) = (free_port(), free_port());
        let conf_dir = dir.path().join("conf");
        let controller = Command::new(bin("vireo-controller"))
            .arg("--kubeconfig")
            .arg(server.kubeconfig())
            .args(["--ingress-class", "vireo", "--publish-address", "127.0.0.1"])
            .args(scope)
            .arg("--conf-dir")
            .arg(&conf_dir)
            .arg("--vireo-pid-file")
            .arg(dir.path().join("vireo.pid"))
            .arg("--vireo-bin")
            .arg(bin("vireo"))
            .args([
                "--http-listen",
                &format!("127.0.0.1:{http}"),
                "--https-listen",
                &format!("127.0.0.1:{https}"),
            ])
            .args(["--debounce-ms", "50"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
            .spawn()
            .unwrap();
        let mut edge = Edge {
            http,
            https,
            dir,
            vireo: None,
            controller: Daemon(controller),
        };
        let conf = conf_dir.join("vireo.conf");
        assert!(
            eventually(30, || conf.exists()),
            "no configuration written: {}",
            edge.log()
        );
        let vireo = Command::new(bin("vireo"))
            .arg("-p")
            .arg(&conf_dir)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(edge.dir.path().join("vireo.log")).unwrap())
            .spawn()
            .unwrap();
        edge.vireo = Some(Daemon(vireo));
        assert!(
            eventually(10, || std::net::TcpStream::connect(("127.0.0.1", http))
                .is_ok()),
            "vireo did not start: {}",
            edge.dir.read("vireo.log")
        );
        edge
    }

    pub fn log(&self) -> String {
        format!(
            "controller:\n{}\nvireo:\n{}",
            self.dir.read("controller.log"),
            self.dir.read("vireo.log")
        )
    }

    pub fn vireo_pid(&self) -> u32 {
        self.vireo.as_ref().unwrap().0.id()
    }

    /// A request through vireo: (status, head, body).
    pub fn get(&self, url: &str, args: &[&str]) -> (u16, String, String) {
        let (host, port) = match url.split_once("://") {
            Some(("https", rest)) => (rest.split('/').next().unwrap(), self.https),
            Some((_, rest)) => (rest.split('/').next().unwrap(), self.http),
            None => panic!("{url}"),
        };
        let url = url.replacen(host, &format!("{host}:{port}"), 1);
        let out = Command::new("curl")
            .args([
                "-sS",
                "-k",
                "-i",
                "--max-time",
                "10",
                "--resolve",
                &format!("{host}:{port}:127.0.0.1"),
            ])
            .args(args)
            .arg(&url)
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, head.to_string(), body.to_string())
    }

    /// Waits until `url` answers with a body starting `prefix`; the last answer otherwise.
    pub fn until(&self, url: &str, args: &[&str], status: u16, prefix: &str) {
        let mut last = (0, String::new(), String::new());
        let ok = eventually(20, || {
            last = self.get(url, args);
            last.0 == status && last.2.starts_with(prefix)
        });
        assert!(
            ok,
            "{url} {args:?}: wanted {status} {prefix:?}, got {last:?}\n{}",
            self.log()
        );
    }
}

pub async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = object(json!({"metadata": {"name": name}}));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    // The class is cluster-wide, shared by the tests.
    let class: IngressClass = object(
        json!({"metadata": {"name": "vireo"}, "spec": {"controller": "vireo.dev/ingress-controller"}}),
    );
    let _ = Api::<IngressClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await;
}

/// A Service `name` (port 80, named http) whose EndpointSlice holds BACKEND_IP:`port`.
pub async fn service(client: &Client, ns: &str, name: &str, port: u16) {
    let svc: Service = object(
        json!({"metadata": {"name": name}, "spec": {"ports": [{"name": "http", "port": 80}]}}),
    );
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &slice(name, port))
        .await
        .unwrap();
}

pub fn slice(svc: &str, port: u16) -> EndpointSlice {
    object(json!({
        "metadata": {"name": svc, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [BACKEND_IP], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}]
    }))
}

/// One HTTP/1.1 request on a new connection to vireo's plain port: (status, body).
pub fn fetch(port: u16, host: &str, path: &str) -> Option<(u16, String)> {
    request(port, "GET", host, path, &[]).map(|(status, _, body)| (status, body))
}

/// One HTTP/1.1 request of `method` with `headers` (`Name: value` lines) on a new
/// connection to vireo's plain port: (status, head, body).
pub fn request(
    port: u16,
    method: &str,
    host: &str,
    path: &str,
    headers: &[&str],
) -> Option<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let fields: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{fields}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((
        head.split_whitespace().nth(1)?.parse().ok()?,
        head.to_string(),
        body.to_string(),
    ))
}

/// The API of a Gateway API kind (`gateway.networking.k8s.io/v1`), in `ns` or cluster-wide.
fn gateway_api(
    client: &Client,
    ns: Option<&str>,
    kind: &str,
    plural: &str,
) -> Api<kube::api::DynamicObject> {
    use kube::api::{ApiResource, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// A Gateway API object (`gateway.networking.k8s.io/v1`) of `kind`, created.
pub async fn create_gateway_api(
    client: &Client,
    ns: Option<&str>,
    kind: &str,
    plural: &str,
    obj: Value,
) {
    let mut obj = obj;
    obj["apiVersion"] = json!("gateway.networking.k8s.io/v1");
    obj["kind"] = json!(kind);
    let obj: kube::api::DynamicObject = object(obj);
    gateway_api(client, ns, kind, plural)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

/// A Gateway API object of `kind` in `ns`, deleted.
pub async fn delete_gateway_api(client: &Client, ns: &str, kind: &str, plural: &str, name: &str) {
    gateway_api(client, Some(ns), kind, plural)
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
}

/// An HTTPRoute `name` in `ns` with `spec`, created.
pub async fn http_route(client: &Client, ns: &str, name: &str, spec: Value) {
    create_gateway_api(
        client,
        Some(ns),
        "HTTPRoute",
        "httproutes",
        json!({"metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

/// GatewayClass `class` of our controller, and Gateway `gw` of it in `ns` with `listeners`.
pub async fn gateway(client: &Client, ns: &str, class: &str, listeners: Value) {
    create_gateway_api(
        client,
        None,
        "GatewayClass",
        "gatewayclasses",
        json!({"metadata": {"name": class},
            "spec": {"controllerName": "vireo.dev/gateway-controller"}}),
    )
    .await;
    create_gateway_api(
        client,
        Some(ns),
        "Gateway",
        "gateways",
        json!({"metadata": {"name": "gw"},
            "spec": {"gatewayClassName": class, "listeners": listeners}}),
    )
    .await;
}

/// The status of a Gateway API object.
pub async fn gateway_api_status(
    client: &Client,
    ns: &str,
    kind: &str,
    plural: &str,
    name: &str,
) -> Value {
    let api = gateway_api(client, Some(ns), kind, plural);
    api.get(name).await.unwrap().data["status"].clone()
}
