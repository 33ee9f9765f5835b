// Command meshrelay-plugin-envoy is meshrelay's Envoy translator plugin:
// it serves the envoy backend, turning policies into xDS resources that
// agents serve to Envoy proxies and gRPC xDS clients. The host starts it;
// run by hand it says so and exits.
package main
