// Command meshrelay-plugin-netpol is an example meshrelay translator: it
// turns AccessPolicies into Kubernetes NetworkPolicies. README.md walks
// through writing it.
package main
