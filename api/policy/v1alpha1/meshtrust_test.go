package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMeshTrustValidate(t *testing.T) {
	east := []string{"east"}
	tests := map[string]struct {
		spec MeshTrustSpec
		want []string // fields at fault
	}{
		"clusters only": {spec: MeshTrustSpec{Clusters: []string{"east"}}},
		"no clusters":   {spec: MeshTrustSpec{}, want: []string{"spec.clusters"}},
		"everything": {spec: MeshTrustSpec{
			Clusters: []string{"east", "west"}, MeshNamespace: "istio-system", TrustDomains: []string{"cluster.local", "east.example.com"},
			Root:         MeshRoot{Secret: &RootSecret{Namespace: "meshrelay", Name: "mesh-root"}},
			Intermediate: IntermediateCA{TTL: dur(48 * time.Hour), RenewBefore: dur(24 * time.Hour)},
			Rotation:     RootRotation{Generation: 3, RenewBefore: dur(time.Hour), ExcludedClusters: []string{"west"}},
			Bounce:       &Bounce{Enabled: true, PerMinute: 10},
		}},
		"bad names":           {spec: MeshTrustSpec{Clusters: []string{"East"}, MeshNamespace: "istio_system"}, want: []string{"spec.clusters[0]", "spec.meshNamespace"}},
		"bad trust domains":   {spec: MeshTrustSpec{Clusters: []string{"east"}, TrustDomains: []string{"Cluster.Local", "a/b"}}, want: []string{"spec.trustDomains[0]", "spec.trustDomains[1]"}},
		"excluded non-member": {spec: MeshTrustSpec{Clusters: []string{"east"}, Rotation: RootRotation{ExcludedClusters: []string{"west"}}}, want: []string{"spec.rotation.excludedClusters[0]"}},
		"two roots":           {spec: MeshTrustSpec{Clusters: east, Root: MeshRoot{Files: &RootFiles{CertFile: "a", KeyFile: "b"}, Secret: &RootSecret{Namespace: "a", Name: "b"}}}, want: []string{"spec.root"}},
		"files without key":   {spec: MeshTrustSpec{Clusters: east, Root: MeshRoot{Files: &RootFiles{CertFile: "a"}}}, want: []string{"spec.root.files.keyFile"}},
		"secret without name": {spec: MeshTrustSpec{Clusters: east, Root: MeshRoot{Secret: &RootSecret{Namespace: "a"}}}, want: []string{"spec.root.secret.name"}},
		"short intermediate":  {spec: MeshTrustSpec{Clusters: east, Intermediate: IntermediateCA{TTL: dur(time.Minute)}}, want: []string{"spec.intermediate.ttl"}},
		"renew after expiry":  {spec: MeshTrustSpec{Clusters: east, Intermediate: IntermediateCA{TTL: dur(2 * time.Hour), RenewBefore: dur(3 * time.Hour)}}, want: []string{"spec.intermediate.renewBefore"}},
		"rate":                {spec: MeshTrustSpec{Clusters: east, Bounce: &Bounce{Enabled: true, PerMinute: MaxBouncePerMinute + 1}}, want: []string{"spec.bounce.perMinute"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &MeshTrust{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "meshrelay"}, Spec: tc.spec}
			var got []string
			for _, e := range p.Validate() {
				got = append(got, e.Field)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Validate() fields = %v, want %v (%v)", got, tc.want, p.Validate())
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("Validate() fields = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestMeshTrustDefaults(t *testing.T) {
	var s MeshTrustSpec
	if s.Namespace() != "istio-system" || s.IntermediateTTL() != DefaultIntermediateTTL ||
		s.IntermediateRenewBefore() != DefaultIntermediateTTL/3 || s.BouncePerMinute() != 0 {
		t.Errorf("defaults: %s %v %v %d", s.Namespace(), s.IntermediateTTL(), s.IntermediateRenewBefore(), s.BouncePerMinute())
	}
	s.Bounce = &Bounce{Enabled: true}
	if s.BouncePerMinute() != DefaultBouncePerMinute {
		t.Errorf("BouncePerMinute() = %d, want %d", s.BouncePerMinute(), DefaultBouncePerMinute)
	}
}
