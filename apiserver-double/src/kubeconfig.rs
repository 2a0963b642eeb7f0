//! The kubeconfig file that points clients at the double.

use std::io;
use std::path::{Path, PathBuf};

/// A kubeconfig written to disk; a temporary one is removed on drop.
#[derive(Debug)]
pub(crate) struct KubeconfigFile {
    path: PathBuf,
    temp_dir: Option<PathBuf>,
}

impl KubeconfigFile {
    /// Writes the kubeconfig to `path`, or into a new temporary directory.
    pub fn write(path: Option<&Path>, server: &str, token: &str) -> io::Result<Self> {
        let (path, temp_dir) = match path {
            Some(p) => (p.to_path_buf(), None),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "apiserver-double-{}-{:016x}",
                    std::process::id(),
                    crate::ids::random_u64()
                ));
                std::fs::create_dir_all(&dir)?;
                (dir.join("kubeconfig"), Some(dir))
            }
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, render(server, token))?;
        Ok(Self { path, temp_dir })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for KubeconfigFile {
    fn drop(&mut self) {
        if let Some(dir) = &self.temp_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The kubeconfig text: one cluster, one user with a bearer token, one context.
pub(crate) fn render(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: apiserver-double\n  cluster:\n    server: {server}\n\
         users:\n\
         - name: apiserver-double\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: apiserver-double\n  context:\n    cluster: apiserver-double\n    user: apiserver-double\n    namespace: default\n\
         current-context: apiserver-double\n\
         preferences: {{}}\n",
        server = quoted(server),
        token = quoted(token),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_kubeconfig_is_removed_on_drop() {
        let k = KubeconfigFile::write(None, "http://127.0.0.1:1", "t").unwrap();
        let p = k.path().to_path_buf();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("server: \"http://127.0.0.1:1\""));
        assert!(text.contains("current-context: apiserver-double"));
        drop(k);
        assert!(!p.exists());
    }
}
