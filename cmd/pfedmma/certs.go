package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/certs"
)

func init() { rootCmd.AddCommand(newCertsCmd()) }

// newCertsCmd builds the certs subcommand: init, add-site, revoke.
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

	var revDir string
	revCmd := &cobra.Command{
		Use:   "revoke --dir D NAME",
		Short: "Revoke a site: the coordinator refuses its certificate at the next handshake",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := certs.Revoke(revDir, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (listed in %s)\n", args[0], certs.RevokedFile)
			return nil
		},
	}
	revCmd.Flags().StringVar(&revDir, "dir", "", "certificates folder")
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
	cmd.AddCommand(initCmd, addCmd, revCmd, opCmd)
	return cmd
}
