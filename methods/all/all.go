// Package all links every method into the program: import it for its side
// effect. Adding a method is one line here.
package all

import (
	_ "github.com/pfedmma/pfedmma/methods/adapt"       // ADAPT
	_ "github.com/pfedmma/pfedmma/methods/clipadapter" // federated CLIP-Adapter
	_ "github.com/pfedmma/pfedmma/methods/cliplora"    // federated CLIP-LoRA
	_ "github.com/pfedmma/pfedmma/methods/cocoop"      // CoCoOp (federated as FLiP / PMFLT)
	_ "github.com/pfedmma/pfedmma/methods/dpfpl"       // DP-FPL
	_ "github.com/pfedmma/pfedmma/methods/fedclip"     // FedCLIP
	_ "github.com/pfedmma/pfedmma/methods/fedmvp"      // FedMVP
	_ "github.com/pfedmma/pfedmma/methods/fedot"       // FedOT, FedOT(+B) and their ablations
	_ "github.com/pfedmma/pfedmma/methods/fedotp"      // FedOTP
	_ "github.com/pfedmma/pfedmma/methods/fedpgp"      // FedPGP
	_ "github.com/pfedmma/pfedmma/methods/fedpha"      // FedPHA
	_ "github.com/pfedmma/pfedmma/methods/fedtpg"      // FedTPG
	_ "github.com/pfedmma/pfedmma/methods/kgcoop"      // KgCoOp (federated as FLiP / PMFLT)
	_ "github.com/pfedmma/pfedmma/methods/maple"       // MaPLe
	_ "github.com/pfedmma/pfedmma/methods/pfedmma"     // pFedMMA
	_ "github.com/pfedmma/pfedmma/methods/pfedmoap"    // pFedMoAP
	_ "github.com/pfedmma/pfedmma/methods/plot"        // PLOT
	_ "github.com/pfedmma/pfedmma/methods/prograd"     // ProGrad (federated as FLiP)
	_ "github.com/pfedmma/pfedmma/methods/promptfl"    // PromptFL
	_ "github.com/pfedmma/pfedmma/methods/promptfolio" // PromptFolio
	_ "github.com/pfedmma/pfedmma/methods/promptsrc"   // PromptSRC
	_ "github.com/pfedmma/pfedmma/methods/zeroshot"    // zero-shot CLIP
)
