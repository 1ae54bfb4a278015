//! vireo-controller: serves a Kubernetes cluster's Ingresses through vireo.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use vireo_controller::watch;

/// Watches Ingress, IngressClass, Service, EndpointSlice and Secret objects and keeps a
/// running vireo's configuration in step with them (docs/ingress.md).
#[derive(Parser, Debug)]
#[command(name = "vireo-controller", version)]
struct Args {
    /// Kubeconfig of the API server (else the in-cluster service account or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The IngressClass whose Ingresses are served.
    #[arg(long, default_value = "vireo")]
    ingress_class: String,
    /// The GatewayClass controllerName whose Gateways (and their routes) are served.
    #[arg(long, default_value = "vireo.dev/gateway-controller")]
    gateway_controller: String,
    /// Directory of the generated vireo.conf, certificates and password files.
    #[arg(long)]
    conf_dir: PathBuf,
    /// The pid file of the vireo to reload (the configuration names it as vireo's `pid`).
    #[arg(long)]
    vireo_pid_file: PathBuf,
    /// The vireo binary that checks configurations (`vireo -t`).
    #[arg(long, default_value = "vireo")]
    vireo_bin: PathBuf,
    /// Address written to the served Ingresses' status.loadBalancer.
    #[arg(long)]
    publish_address: Option<String>,
    /// Take configuration-snippet and server-snippet annotations (raw configuration text).
    #[arg(long)]
    allow_snippets: bool,
    /// Watch this namespace only (IngressClasses are cluster-wide).
    #[arg(long)]
    namespace: Option<String>,
    /// `listen` address of plain HTTP.
    #[arg(long, default_value = "80")]
    http_listen: String,
    /// `listen` address of HTTPS.
    #[arg(long, default_value = "443")]
    https_listen: String,
    /// `resolver` for host names in annotation URLs (auth-url, mirror-target).
    #[arg(long)]
    resolver: Option<String>,
    /// How long changes are gathered before a configuration is made, in milliseconds.
    #[arg(long, default_value_t = 100)]
    debounce_ms: u64,
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let conf_dir = std::path::absolute(&a.conf_dir).unwrap_or(a.conf_dir);
    let cfg = watch::Config {
        kubeconfig: a.kubeconfig,
        ingress_class: a.ingress_class,
        gateway_controller: a.gateway_controller,
        pid_file: std::path::absolute(&a.vireo_pid_file).unwrap_or(a.vireo_pid_file),
        conf_dir,
        vireo_bin: a.vireo_bin,
        publish_address: a.publish_address,
        allow_snippets: a.allow_snippets,
        namespace: a.namespace,
        http_listen: a.http_listen,
        https_listen: a.https_listen,
        resolver: a.resolver,
        debounce: Duration::from_millis(a.debounce_ms),
    };
    if let Err(e) = watch::run(cfg).await {
        eprintln!("vireo-controller: {e}");
        std::process::exit(1);
    }
}
