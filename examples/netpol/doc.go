// Command meshrelay-plugin-netpol is an example meshrelay translator: it
// turns AccessPolicies into Kubernetes NetworkPolicies. It computes one
// target cluster at a time (sdk.Translator) and reads, for each
// target, the AccessPolicies and the target's own Services only, so that
// after a change the SDK computes again only the clusters it concerns.
// README.md walks through writing it.
package main
