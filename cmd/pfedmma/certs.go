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
	cmd.AddCommand(newCertsInitCmd(), newCertsAddSiteCmd(), newCertsRevokeCmd(), newCertsRekeyCmd(), newCertsAddOperatorCmd())
	return cmd
}

// dirFlag defines --dir, the certificates folder, on cmd.
func dirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", "", "certificates folder")
}

// requireDir refuses an empty --dir for subcommand what.
func requireDir(what, dir string) error {
	if dir == "" {
		return fmt.Errorf("certs %s: --dir is required", what)
	}
	return nil
}

// newCertsInitCmd builds `certs init`.
func newCertsInitCmd() *cobra.Command {
	var dir, sites string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "init --dir D --sites site-a,site-b,... [--host NAME]...",
		Short: "Make a CA, a coordinator certificate and one client certificate per site",
		Long:  certs.InitHelp,
		Args:  cobra.NoArgs,
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
	dirFlag(cmd, &dir)
	cmd.Flags().StringVar(&sites, "sites", "", "comma-separated site names (site i is client ID i)")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "extra DNS name or IP address of the coordinator (repeatable)")
	return cmd
}

// newCertsRevokeCmd builds `certs revoke`.
func newCertsRevokeCmd() *cobra.Command {
	var dir string
	var t certs.RevokeTarget
	cmd := &cobra.Command{
		Use:   "revoke --dir D (NAME | --operator NAME | --serial HEX | --fingerprint HEX)",
		Short: "Revoke a site's or an operator's certificate: the coordinator refuses it at the next handshake",
		Long:  certs.RevokeHelp,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireDir("revoke", dir); err != nil {
				return err
			}
			t := t // the flags; NAME is this call's
			if len(args) == 1 {
				t.Name = args[0]
			}
			what, err := certs.RevokeAny(dir, t)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (listed in %s)\n", what, certs.RevokedFile)
			return nil
		},
	}
	dirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&t.Operator, "operator", false, "NAME is an operator (operators/NAME.crt), not a site")
	cmd.Flags().StringVar(&t.Serial, "serial", "", "revoke the certificate with this serial number (hex)")
	cmd.Flags().StringVar(&t.Fingerprint, "fingerprint", "", "revoke the certificate with this SHA-256 fingerprint (hex, colons allowed)")
	return cmd
}

// newCertsNameCmd builds the certs subcommand what on one NAME
// (add-site, rekey, add-operator): do acts and returns the line printed;
// checkDir refuses an empty --dir first.
func newCertsNameCmd(what, short, long string, checkDir bool, do func(dir, name string) (string, error)) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   what + " --dir D NAME",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if checkDir {
				if err := requireDir(what, dir); err != nil {
					return err
				}
			}
			line, err := do(dir, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	dirFlag(cmd, &dir)
	return cmd
}

// newCertsAddSiteCmd builds `certs add-site`.
func newCertsAddSiteCmd() *cobra.Command {
	return newCertsNameCmd("add-site", "Issue a certificate for a new site (the next client ID)", "", false, func(dir, name string) (string, error) {
		id, err := certs.AddSite(dir, name)
		return fmt.Sprintf("site %s is client %d", name, id), err
	})
}

// newCertsRekeyCmd builds `certs rekey`.
func newCertsRekeyCmd() *cobra.Command {
	return newCertsNameCmd("rekey", "Give a site a new certificate (same client ID), revoking its current one", certs.RekeyHelp, true, func(dir, name string) (string, error) {
		return fmt.Sprintf("site %s: old certificate revoked, new one in %s/%s.crt and .key", name, certs.SitesDir, name), certs.Rekey(dir, name)
	})
}

// newCertsAddOperatorCmd builds `certs add-operator`.
func newCertsAddOperatorCmd() *cobra.Command {
	return newCertsNameCmd("add-operator", "Issue an operator certificate: it opens the dashboard, /api/status and /metrics (never the federation)", certs.AddOperatorHelp, true,
		func(dir, name string) (string, error) {
			return fmt.Sprintf("operator %s: %s/%s.crt and .key", name, certs.OperatorsDir, name), certs.AddOperator(dir, name)
		})
}
