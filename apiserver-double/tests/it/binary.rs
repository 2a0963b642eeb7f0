//! The `apiserver-double` binary: kubeconfig path on the first stdout line,
//! serves until SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::Http;

#[tokio::test]
async fn prints_kubeconfig_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("apiserver-double-bin-{}", std::process::id()));
    let path = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_apiserver-double"))
        .args(["--kubeconfig", path.to_str().unwrap(), "--token", "secret"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first.trim(), path.to_str().unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let addr = server.strip_prefix("http://").unwrap().parse().unwrap();
    let http = Http {
        addr,
        token: "secret".into(),
    };
    assert_eq!(http.get("/api/v1/namespaces/default").await.status, 200);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exited = None;
    for _ in 0..100 {
        if let Some(s) = child.try_wait().unwrap() {
            exited = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(exit) = exited else {
        let _ = child.kill();
        panic!("did not stop on SIGTERM");
    };
    assert!(exit.success());
    let _ = std::fs::remove_dir_all(dir);
}
