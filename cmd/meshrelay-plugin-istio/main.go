package main

import (
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
)

func main() { sdk.Serve(istio.New()) }
