//! The `apiserver-double` binary: kubeconfig path on the first stdout line,
//! serves until SIGTERM; driven from another process through `/_double/`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::Http;

/// The binary, started with `--kubeconfig` in a directory of its own and `args`;
/// killed on drop.
struct Double {
    child: Child,
    dir: PathBuf,
    kubeconfig: PathBuf,
    /// The path the binary printed first.
    printed: String,
}

impl Double {
    fn spawn(name: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "apiserver-double-bin-{name}-{}",
            std::process::id()
        ));
        let kubeconfig = dir.join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_apiserver-double"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let mut printed = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut printed)
            .unwrap();
        Self {
            child,
            dir,
            kubeconfig,
            printed: printed.trim().to_owned(),
        }
    }

    /// A client for the server the kubeconfig names.
    fn http(&self, token: &str) -> Http {
        let text = std::fs::read_to_string(&self.kubeconfig).unwrap();
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .unwrap()
            .trim_matches('"')
            .to_string();
        Http {
            addr: server.strip_prefix("http://").unwrap().parse().unwrap(),
            token: token.into(),
        }
    }

    fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
}

impl Drop for Double {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn prints_kubeconfig_and_stops_on_sigterm() {
    let mut double = Double::spawn("sigterm", &["--token", "secret"]);
    assert_eq!(double.printed, double.kubeconfig().to_str().unwrap());
    let http = double.http("secret");
    assert_eq!(http.get("/api/v1/namespaces/default").await.status, 200);

    let status = Command::new("kill")
        .args(["-TERM", &double.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exited = None;
    for _ in 0..100 {
        if let Some(s) = double.child.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(exit) = exited else {
        panic!("did not stop on SIGTERM");
    };
    assert!(exit.success());
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"k": name}})
}

fn lines(objects: &[Value]) -> Vec<u8> {
    let mut body = Vec::new();
    for object in objects {
        body.extend(serde_json::to_vec(object).unwrap());
        body.extend(b"\n\n");
    }
    body
}

#[tokio::test]
async fn seeds_objects_in_bulk_and_names_the_line_that_failed() {
    let double = Double::spawn("objects", &["--token", "secret"]);
    let http = double.http("secret");
    let r = http
        .send(
            "POST",
            "/_double/objects",
            &[],
            Some(lines(&[configmap("a"), configmap("b")])),
        )
        .await;
    assert_eq!((r.status, r.json()), (200, json!({"created": 2})));
    let got = http.get("/api/v1/namespaces/default/configmaps/b").await;
    assert_eq!(got.json()["data"]["k"], "b");

    // The third object exists already; the second line is created, the fourth is not tried.
    let mut body = lines(&[configmap("c")]);
    body.extend(lines(&[configmap("a"), configmap("d")]));
    let r = http.send("POST", "/_double/objects", &[], Some(body)).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["created"], 1);
    assert!(
        r.json()["error"].as_str().unwrap().starts_with("line 3: "),
        "{}",
        r.json()
    );
    assert_eq!(
        http.get("/api/v1/namespaces/default/configmaps/d")
            .await
            .status,
        404
    );
    let r = http
        .send("POST", "/_double/objects", &[], Some(b"{nope\n".to_vec()))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["created"], 0);
    // Seeding is not an API request: the log has the two GETs only.
    let state = http.send("GET", "/_double/state", &[], None).await.json();
    assert_eq!(state["lastRequestSeq"], 2);
}

fn micros_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[tokio::test]
async fn streams_its_request_log_with_wall_clock_times_and_service_times() {
    let double = Double::spawn("log", &["--token", "secret", "--no-record-bodies"]);
    let http = double.http("secret");
    let before = micros_now();
    http.post("/api/v1/namespaces/default/configmaps", &configmap("x"))
        .await;
    http.get("/api/v1/namespaces/default/configmaps/x").await;
    let after = micros_now();

    let log = http
        .watch_until(
            "/_double/request-log?after=0",
            &[],
            Duration::from_secs(30),
            |lines| lines.len() >= 2,
        )
        .await;
    assert_eq!(log[0]["seq"], 1);
    assert_eq!(log[0]["method"], "POST");
    assert_eq!(log[0]["status"], 201);
    assert_eq!(log[1]["seq"], 2);
    assert_eq!(log[1]["path"], "/api/v1/namespaces/default/configmaps/x");
    assert!(log[0].get("body").is_none());
    for line in &log {
        let received = line["receivedAtMicros"].as_u64().unwrap();
        let service = line["serviceMicros"].as_u64().unwrap();
        assert!(
            (before..=after).contains(&received) && received + service <= after,
            "{line} not within {before}..{after}"
        );
    }

    // From a later `seq` on, and following: a request made once the stream has
    // delivered what was there arrives on it.
    let caught_up = std::sync::Arc::new(tokio::sync::Notify::new());
    let follower = {
        let (http, caught_up) = (http.clone(), caught_up.clone());
        tokio::spawn(async move {
            http.watch_until(
                "/_double/request-log?after=1",
                &[],
                Duration::from_secs(30),
                |lines| {
                    if lines.len() == 1 {
                        caught_up.notify_one();
                    }
                    lines.iter().any(|l| l["seq"] == 3)
                },
            )
            .await
        })
    };
    caught_up.notified().await;
    http.get("/api/v1/namespaces/default/configmaps/missing")
        .await;
    let followed = follower.await.unwrap();
    let seqs: Vec<&Value> = followed.iter().map(|l| &l["seq"]).collect();
    assert_eq!(seqs, [&json!(2), &json!(3)]);
    assert_eq!(followed[1]["status"], 404);
}
