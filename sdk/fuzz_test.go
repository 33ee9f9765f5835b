package sdk

import (
	"context"
	"testing"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzSession feeds arbitrary request messages to a session: nothing may
// panic, and every Commit the session accepts is answered with a Done.
func FuzzSession(f *testing.F) {
	seed := func(m *translatorv1.TranslateRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: &translatorv1.ClusterInput{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 3)}}}})
	seed(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Policies{Policies: &translatorv1.PolicyChange{Upserts: []*snapshotv1.Resource{policyRes("p", invalidPolicy)}}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m translatorv1.TranslateRequest
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		tr := &fake{}
		s := newSession(tr, tr.Describe())
		var dones int
		send := func(r *translatorv1.TranslateResponse) error {
			if r.GetDone() != nil {
				dones++
			}
			return nil
		}
		ctx := context.Background()
		begin := &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: 1, Full: true}}}
		commit := &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: 1}}}
		if err := s.handle(ctx, begin, send); err != nil {
			t.Fatal(err)
		}
		if err := s.handle(ctx, &m, send); err != nil {
			return
		}
		if err := s.handle(ctx, commit, send); err == nil && dones == 0 {
			t.Fatal("a commit was not answered")
		}
	})
}
