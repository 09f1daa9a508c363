package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/certs"
)

func init() { rootCmd.AddCommand(newCertsCmd()) }

// newCertsCmd builds the certs subcommand: init, add-site, revoke, rekey,
// add-operator.
func newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make the federation's CA, coordinator and site certificates (mTLS)",
	}
	var dir, sites string
	var hosts []string
	initCmd := &cobra.Command{
		Use:   "init --dir D --sites site-a,site-b,... [--host NAME]...",
		Short: "Make a CA, a coordinator certificate and one client certificate per site",
		Long: "Makes, in --dir, a CA (ca.crt, ca.key: keep the key offline), a coordinator certificate for\n" +
			"localhost, 127.0.0.1, ::1 and every --host, and one client certificate per site under sites/.\n" +
			"A site's identity is its certificate's CN; the i-th site of --sites is client ID i (sites.txt).\n" +
			"Give each site ca.crt, sites.txt (it finds its client ID there) and its own sites/<name>.crt and .key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || sites == "" {
				return fmt.Errorf("certs init: --dir and --sites are required")
			}
			list := strings.Split(sites, ",")
			if err := certs.Init(dir, list, hosts); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote a CA, a coordinator certificate and %d site certificates to %s\n", len(list), dir)
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "", "certificates folder")
	initCmd.Flags().StringVar(&sites, "sites", "", "comma-separated site names (site i is client ID i)")
	initCmd.Flags().StringSliceVar(&hosts, "host", nil, "extra DNS name or IP address of the coordinator (repeatable)")

	var addDir string
	addCmd := &cobra.Command{
		Use:   "add-site --dir D NAME",
		Short: "Issue a certificate for a new site (the next client ID)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := certs.AddSite(addDir, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "site %s is client %d\n", args[0], id)
			return nil
		},
	}
	addCmd.Flags().StringVar(&addDir, "dir", "", "certificates folder")

	var revDir, revSerial, revFP string
	var revOp bool
	revCmd := &cobra.Command{
		Use:   "revoke --dir D (NAME | --operator NAME | --serial HEX | --fingerprint HEX)",
		Short: "Revoke a site's or an operator's certificate: the coordinator refuses it at the next handshake",
		Long: `Revoke a certificate by adding it to D/revoked.txt, which the coordinator re-reads every second
and at every handshake (sites and the dashboard alike): a connected site is cut off within a
second, and an upload it is sending is discarded.
  NAME                 site NAME's certificate D/sites/NAME.crt (by its serial number)
  --operator NAME      operator NAME's certificate D/operators/NAME.crt
  --serial HEX         any certificate by serial number (openssl x509 -noout -serial)
  --fingerprint HEX    any certificate by SHA-256 fingerprint (openssl x509 -noout -fingerprint -sha256)
A site whose certificate is revoked keeps its client ID and can be given a new one with
'pfedmma certs rekey'. revoked.txt holds one entry a line: serial:HEX [NAME], sha256:HEX [NAME],
or (lists of older versions) a bare site name, which revokes every certificate of that site.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if revDir == "" {
				return fmt.Errorf("certs revoke: --dir is required")
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			given := 0
			for _, g := range []bool{name != "", revSerial != "", revFP != ""} {
				if g {
					given++
				}
			}
			if given != 1 || (revOp && name == "") {
				return fmt.Errorf("certs revoke: give one of NAME (a site; with --operator an operator), --serial or --fingerprint")
			}
			var err error
			what := name
			switch {
			case revOp:
				err, what = certs.RevokeOperator(revDir, name), "operator "+name
			case name != "":
				err = certs.Revoke(revDir, name)
			case revSerial != "":
				err, what = certs.RevokeSerial(revDir, revSerial, ""), "serial "+revSerial
			default:
				err, what = certs.RevokeFingerprint(revDir, revFP, ""), "fingerprint "+revFP
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (listed in %s)\n", what, certs.RevokedFile)
			return nil
		},
	}
	revCmd.Flags().StringVar(&revDir, "dir", "", "certificates folder")
	revCmd.Flags().BoolVar(&revOp, "operator", false, "NAME is an operator (operators/NAME.crt), not a site")
	revCmd.Flags().StringVar(&revSerial, "serial", "", "revoke the certificate with this serial number (hex)")
	revCmd.Flags().StringVar(&revFP, "fingerprint", "", "revoke the certificate with this SHA-256 fingerprint (hex, colons allowed)")
	var rekeyDir string
	rekeyCmd := &cobra.Command{
		Use:   "rekey --dir D NAME",
		Short: "Give a site a new certificate (same client ID), revoking its current one",
		Long: `Revoke site NAME's current certificate (by serial) and issue a new sites/NAME.crt and .key
with the same client ID. Give the site the new pair: it registers again and rejoins the
federation's schedule. A line of revoked.txt revoking NAME by name (older lists) is removed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rekeyDir == "" {
				return fmt.Errorf("certs rekey: --dir is required")
			}
			if err := certs.Rekey(rekeyDir, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "site %s: old certificate revoked, new one in %s/%s.crt and .key\n", args[0], certs.SitesDir, args[0])
			return nil
		},
	}
	rekeyCmd.Flags().StringVar(&rekeyDir, "dir", "", "certificates folder")
	var opDir string
	opCmd := &cobra.Command{
		Use:   "add-operator --dir D NAME",
		Short: "Issue an operator certificate: it opens the dashboard, /api/status and /metrics (never the federation)",
		Long: `Issue an operator certificate, signed by the federation's CA, as operators/NAME.crt and
operators/NAME.key in the certificates folder. The coordinator's dashboard, /api/status and
/metrics (pfedmma serve --http) answer only clients presenting such a certificate, or the
bearer token of --http-token-file. With curl:
  curl --cacert D/ca.crt --cert D/operators/NAME.crt --key D/operators/NAME.key https://HOST:7444/api/status
A browser needs them as a PKCS#12 bundle:
  openssl pkcs12 -export -in D/operators/NAME.crt -inkey D/operators/NAME.key -out NAME.p12`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opDir == "" {
				return fmt.Errorf("certs add-operator: --dir is required")
			}
			if err := certs.AddOperator(opDir, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "operator %s: %s/%s.crt and .key\n", args[0], certs.OperatorsDir, args[0])
			return nil
		},
	}
	opCmd.Flags().StringVar(&opDir, "dir", "", "certificates folder")
	cmd.AddCommand(initCmd, addCmd, revCmd, rekeyCmd, opCmd)
	return cmd
}
