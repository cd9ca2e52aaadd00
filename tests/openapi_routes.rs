//! Holds `openapi/tensorport.yaml` to the routes the server really serves: every path the
//! router lists must be in the document with exactly the methods the server answers, and the
//! document must name no path the server lacks. Adding a route without a spec entry fails here.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{repo_path, TestResult, TestServer};

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// `paths:` of the document: path template -> methods. The document keeps the layout
/// yamllint enforces (two-space indents), so paths are the keys indented by two and methods
/// the keys indented by four below them.
fn spec_paths() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(repo_path("openapi/tensorport.yaml"))
        .expect("openapi/tensorport.yaml is readable");
    let mut paths = BTreeMap::new();
    let mut in_paths = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.starts_with('#') && !line.is_empty() {
            in_paths = line == "paths:";
            current = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(path) = line
            .strip_prefix("  /")
            .and_then(|rest| rest.strip_suffix(':'))
        {
            let path = format!("/{path}");
            paths.insert(path.clone(), BTreeSet::new());
            current = Some(path);
        } else if let (Some(path), Some(key)) = (
            &current,
            line.strip_prefix("    ").and_then(|k| k.strip_suffix(':')),
        ) {
            if METHODS.contains(&key) {
                paths
                    .get_mut(path)
                    .expect("current path was inserted")
                    .insert(key.to_owned());
            }
        }
    }
    assert!(
        paths.len() > 20,
        "found too few paths in the document: {paths:?}"
    );
    paths
}

fn concrete(template: &str) -> String {
    template
        .replace("{name}", "ranker")
        .replace("{version}", "2")
        .replace("{label}", "stable")
        .replace("{region}", "openapi_routes_probe")
}

/// The methods the running server answers on `path` with something other than 405 or its
/// catch-all "no such endpoint" 404.
async fn served_methods(client: &reqwest::Client, url: &str) -> BTreeSet<String> {
    let mut served = BTreeSet::new();
    for method in METHODS {
        let response = client
            .request(method.to_uppercase().parse().expect("method"), url)
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        let unrouted = status == 405 || (status == 404 && body.contains("no such endpoint"));
        if !unrouted {
            served.insert(method.to_owned());
        }
    }
    served
}

#[test]
fn every_routed_path_is_in_the_spec_and_nothing_else() {
    let spec = spec_paths();
    let routed: BTreeSet<&str> = tensorport::server::rest_route_paths().into_iter().collect();
    let missing: Vec<&&str> = routed.iter().filter(|p| !spec.contains_key(**p)).collect();
    assert!(
        missing.is_empty(),
        "routes without an entry in openapi/tensorport.yaml: {missing:?}"
    );
    let invented: Vec<&String> = spec
        .keys()
        .filter(|p| !routed.contains(p.as_str()))
        .collect();
    assert!(
        invented.is_empty(),
        "openapi/tensorport.yaml documents paths the server does not route: {invented:?}"
    );
}

#[tokio::test]
async fn the_spec_names_exactly_the_methods_the_server_answers() -> TestResult {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let mut wrong = Vec::new();
    for (template, methods) in spec_paths() {
        let url = format!("{}{}", server.rest_url, concrete(&template));
        let served = served_methods(&client, &url).await;
        if served != methods {
            wrong.push(format!(
                "{template}: the spec says {methods:?}, the server answers {served:?}"
            ));
        }
    }
    server.stop().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}
