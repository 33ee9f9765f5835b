package v1alpha1

// Run from the repository root (go generate ./api/... does the same).
//go:generate sh -c "cd ../../.. && go tool -modfile=tools/codegen/go.mod controller-gen object paths=./api/policy/v1alpha1/..."
//go:generate sh -c "cd ../../.. && go tool -modfile=tools/codegen/go.mod controller-gen crd paths=./api/policy/v1alpha1/... output:crd:artifacts:config=deploy/crds"
