package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/deploy"
)

// TestSitePolicyFlags (issue 34): --policy FILE sets the site's policy,
// its flags are shorthands for its keys, a key given both ways is an error
// naming both, and a bad file names the file and the key.
func TestSitePolicyFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte("methods: [fedotp]\nsettings: {fedotp.avg_prompt: 1}\nmax_upload_mib: 0.25\nrequire_secure_aggregation: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("max_uploads_mib: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (deploy.SitePolicy, error) {
		t.Helper()
		var p deploy.SitePolicy
		var f string
		fl := pflag.NewFlagSet("site", pflag.ContinueOnError)
		addPolicyFlags(fl, &p, &f)
		if err := fl.Parse(args); err != nil {
			t.Fatal(err)
		}
		return p, sitePolicy(fl, &p, f)
	}
	p, err := parse("--policy", file, "--min-participants", "3", "--max-download-mib", "16")
	if err != nil || strings.Join(p.AcceptMethods, ",") != "fedotp" || p.Settings["fedotp.avg_prompt"] != "1" || p.MaxUploadMiB != 0.25 ||
		!p.RequireSecureAggregation || p.MinParticipants != 3 || p.MaxDownloadMiB != 16 || p.File != file {
		t.Errorf("--policy with other flags: %+v, %v", p, err)
	}
	if p, err := parse("--require-secure-aggregation", "--max-upload-mib", "2"); err != nil || !p.RequireSecureAggregation || p.MaxUploadMiB != 2 || p.File != "" {
		t.Errorf("flags alone: %+v, %v", p, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", file, "--max-upload-mib", "1"}, "--max-upload-mib and the key max_upload_mib of --policy " + file},
		{[]string{"--policy", file, "--accept-methods", "pfedmma"}, "--accept-methods and the key methods"},
		{[]string{"--policy", bad}, bad + ": max_uploads_mib: line 1: unknown key"},
		{[]string{"--max-upload-mib", "-1"}, "--max-upload-mib -1"},
		{[]string{"--min-participants", "-2"}, "--min-participants -2"},
		{[]string{"--accept-methods", "fedopt"}, `"fedopt" is no method`},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error naming %q", c.args, err, c.want)
		}
	}
}
