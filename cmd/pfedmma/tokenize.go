package main

import (
	"bufio"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/tokenizer"
)

func init() {
	var (
		vocab    string
		truncate bool
		context  int
	)
	cmd := &cobra.Command{
		Use:   "tokenize --vocab FILE [--truncate] TEXT...",
		Short: "Print CLIP token ids of texts as JSON",
		Long:  tokenizer.CommandHelp,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if context < 1 || context > tokenizer.MaxContextLength {
				return fmt.Errorf("tokenize: --context %d: want 1 to %d tokens (CLIP uses %d)", context, tokenizer.MaxContextLength, tokenizer.ContextLength)
			}
			tok, err := tokenizer.Load(vocab)
			if err != nil {
				return err
			}
			rows, err := tok.TokenizeBatch(args, context, truncate)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			tokenizer.WriteJSON(w, rows)
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&vocab, "vocab", "", "CLIP vocabulary: bpe_simple_vocab_16e6.txt.gz, vocab.json, or a folder (required)")
	cmd.Flags().BoolVar(&truncate, "truncate", false, "cut texts that are too long (last id becomes <|endoftext|>)")
	cmd.Flags().IntVar(&context, "context", tokenizer.ContextLength, "context length (ids per text)")
	_ = cmd.MarkFlagRequired("vocab") // cannot fail: the flag is defined above
	rootCmd.AddCommand(cmd)
}
