package main

import "github.com/meshrelay/meshrelay/sdk"

func main() { sdk.Serve(&Translator{}) }
