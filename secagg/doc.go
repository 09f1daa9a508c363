// Package secagg is secure aggregation for federated averaging in the style
// of SecAgg+ (Bell et al. 2020, "Secure Single-Server Aggregation with
// (Poly)Logarithmic Overhead"), itself built on SecAgg (Bonawitz et al.
// 2017): the server learns the weighted sum of the sites' updates and nothing
// else about any one of them. It is pure Go and knows nothing of transport:
// a Client and a Server exchange the messages of four rounds, and the caller
// moves them.
//
// # Rounds
//
//  0. AdvertiseKeys: every site draws two X25519 key pairs (crypto/ecdh),
//     one for its pairwise masks and one for encrypting shares, and a
//     self-mask seed b_i; it sends both public keys and a SHA-256 commitment
//     to b_i.
//  1. ShareKeys: every site Shamir-shares its mask private key and b_i among
//     its share holders (itself and its neighbours in a k-regular Harary
//     graph) and sends each neighbour its shares encrypted with AES-256-GCM
//     under a key agreed by X25519 (the server routes them and cannot read
//     them).
//  2. MaskedInput: every site sends y_i = q_i + PRG(b_i) + Σ_j ±PRG(s_ij)
//     mod 2^64, where q_i is its quantised, weighted update, s_ij the
//     X25519 agreement of its mask key with neighbour j's (j among the
//     neighbours that shared keys; + when i < j, − otherwise), and PRG is
//     AES-256-CTR keyed by the seed.
//  3. Unmasking: the server names the sites whose masked input arrived; each
//     of them reveals, for every site it holds shares of, the share of b for
//     a survivor and the share of the mask key for a site that dropped
//     after sharing keys, never both. The server reconstructs them, removes
//     the self masks of the survivors and the pairwise masks between
//     survivors and dropped sites, and divides the sum by the summed weight.
//
// # Threat model
//
// The server is honest but curious: it follows the protocol and tries to
// learn a site's update from everything it receives and stores (it may
// collude with fewer than t−1 sites among any site's share holders). A
// stored masked input alone is uniform in Z_2^64 (tested); the server
// learns the sum over the survivors, their number and their total weight.
// Every site holds at most one of the two secrets (b_i, mask key) of another
// site's shares per round, and t > (k+1)/2, so that a server following the
// protocol never reconstructs both secrets of one site. A malicious server
// that tells different sites different survivor sets is out of scope (the
// consistency-check round of SecAgg is not implemented), as are malicious
// sites poisoning the sum (secure aggregation hides updates, it does not
// vet them: robust rules that need each update are refused with it). Keys
// and seeds are fresh every round; the transport (mTLS) authenticates the
// sites, so the server cannot impersonate one.
//
// # Neighbour graph and thresholds
//
// Sites are placed on a ring in the order of SHA-256(session ‖ id) and each
// is joined to the k/2 nearest on either side (a Harary graph H(k, n)); when
// k ≥ n−1 the graph is complete (plain SecAgg). A site's share holders are
// itself and its k neighbours; any t = ⌊(k+1)/2⌋ + 1 of them reconstruct a
// secret. The default k (DefaultDegree) is the smallest even k for which,
// with every site dropping independently with probability δ (default 0.3,
// Options.Dropout), n·P[Binomial(k, δ) ≥ k/2] ≤ 2^-20: the round then
// survives a δ fraction of drops after key sharing except with probability
// below 2^-20. With n ≤ about 200 sites at δ = 0.3 that is the complete
// graph; k grows as O(log n) beyond. With the complete graph any drop of
// fewer than n − t sites (n=3: 1 site; n=10: 4 sites) is survived whatever
// the sites.
//
// # Quantisation and its error bound
//
// An update x ∈ R^L of weight w ∈ {1, 2, …} (the site's example count for
// FedAvg, 1 for a uniform mean) is clipped to [−C, C] (Options.Clip,
// default 256) and quantised to q = w · round(x · 2^s) (s = Options.ScaleBits,
// default 24) as two's-complement integers in Z_2^64; w itself is an extra,
// masked coordinate. The server computes
//
//	x̂ = (Σ_i q_i) / (2^s · Σ_i w_i)
//
// Bound: |round(x·2^s) − x·2^s| ≤ 1/2, so |Σ_i q_i − 2^s Σ_i w_i x_i| ≤
// Σ_i w_i / 2, and |x̂ − Σ_i w_i x_i / Σ_i w_i| ≤ 2^−(s+1) (≈ 3·10⁻⁸ at
// s = 24) for every coordinate whose inputs lie within [−C, C], before the
// final rounding of x̂ to float32 (plus 2^−52·|x̂| for the float64
// division). The sum is exact in Z_2^64 as long as Σ_i w_i · C · 2^s <
// 2^63, which NewConfig checks against Options.MaxTotalWeight (default
// 2^63 / (C · 2^s) = 2^31 examples at the defaults). Because the masked sum
// is exact integer arithmetic, the result depends neither on the masks nor
// on which sites dropped: a simulation that quantises the same way
// (Aggregate) is bit-identical to the protocol.
//
// # Shamir secret sharing
//
// Secrets are 32 bytes, cut into eight 32-bit limbs, each shared with its
// own random polynomial of degree t−1 over GF(p), p = 2^61 − 1 (a Mersenne
// prime: fast, exact uint64 arithmetic); a share is the eight evaluations at
// x = the holder's index + 1. A reconstructed mask key must match its
// advertised public key and a reconstructed b_i its commitment; otherwise
// the unmasking fails naming the site, never silently.
package secagg
