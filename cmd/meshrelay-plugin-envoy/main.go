package main

import (
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk"
)

func main() { sdk.Serve(envoy.New()) }
