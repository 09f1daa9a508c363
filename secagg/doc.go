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
//     to b_i. An authenticated site (Client.Authenticate) also sends its
//     certificate and its signature, with the certificate's key, over the
//     keys, the commitment and the round's settings (session, federation
//     round, site list, degree, threshold, length, quantiser).
//  1. ShareKeys: every authenticated site verifies every relayed
//     advertisement (the certificate chains to the federation's CA for
//     client authentication, names the site's ID when the site list is
//     known, signs for one site only, and its signature holds) and refuses
//     the round otherwise, naming the site. Then it Shamir-shares its mask
//     private key and b_i among its share holders (itself and its
//     neighbours in a k-regular Harary graph) and sends each neighbour its
//     shares encrypted with AES-256-GCM under a key agreed by X25519 (the
//     server routes them and cannot read them).
//  2. MaskedInput: every site sends y_i = q_i + PRG(b_i) + Σ_j ±PRG(s_ij)
//     mod 2^64, where q_i is its quantised, weighted update, s_ij the
//     X25519 agreement of its mask key with neighbour j's (j among the
//     neighbours that shared keys; + when i < j, − otherwise), and PRG is
//     AES-256-CTR keyed by the seed.
//  3. Consistency (Bonawitz et al. 2017, §6): the server names the sites
//     whose masked input arrived; each of them signs that survivor set
//     (Client.SignSurvivors) and the server relays the signatures.
//  4. Unmasking: a site that finds fewer than t signatures, or any
//     signature over another set, refuses to unmask (Client.Unmask).
//     Otherwise it reveals, for every site it holds shares of, the share of
//     b for a survivor and the share of the mask key for a site that
//     dropped after sharing keys, never both. The server reconstructs them,
//     removes the self masks of the survivors and the pairwise masks
//     between survivors and dropped sites, and divides the sum by the
//     summed weight.
//
// A site also refuses a round whose list, advertisers or survivors number
// fewer than its own minimum (Client.RequireSites), and, when it knows the
// site list, a round naming an ID outside it (Authority.Names).
//
// # Threat model
//
// What each adversary can learn or do (n sites in the round, each with k
// neighbours, t of whose k+1 share holders reconstruct a secret):
//
//   - Honest-but-curious coordinator (follows the protocol, keeps
//     everything): learns the sum over the survivors, their number, their
//     total weight and who dropped (and, from the transport, each site's
//     declared example count); a stored masked input alone is uniform in
//     Z_2^64 (tested). Colluding with fewer than t of a site's share
//     holders it learns nothing more (one share per holder, Shamir).
//   - Malicious coordinator without the CA key (relays what it likes, names
//     any participants and survivors): cannot substitute a site's keys
//     (signed; refused naming the site: TestKeySwapAttack reproduces the
//     recovery of an update when keys are unsigned), cannot add identities
//     of its own (every key is signed by a distinct certificate of the
//     federation's CA), cannot show neighbours different round settings
//     (they are signed with the keys) or sites different survivor sets (the
//     consistency round: every site refuses). Each honest holder reveals
//     one of a site's two secrets, so it learns one site's update only if
//     at least 2t − (k+1) of that site's share holders collude with it:
//     with the default t = ⌊(k+1)/2⌋+1 that is one site when k+1 is odd,
//     two when it is even; a larger Options.Threshold (t > (k+1+c)/2)
//     tolerates c. It can choose which sites take part (down to the sites'
//     minimum and the threshold), drop any of them, stop a round, and
//     publish a wrong model: secure aggregation hides updates, it does not
//     make the coordinator honest. Not prevented: differencing two
//     sessions. A site that fits the same round again from the same state
//     can compute the same update, so a coordinator that unmasks the round's
//     sum over {A, B, C}, restarts it and unmasks {B, C} learns A's
//     update; a site's minimum bounds the sets but not this.
//   - Malicious coordinator holding the CA key: can issue a certificate in
//     any site's name, sign forged keys with it and recover any site's
//     update (the attack above). Hence the operational rule: keep ca.key
//     off the coordinator (certs init writes it beside the coordinator's
//     key: move it to an offline machine, where add-site and revoke run).
//   - Colluding sites (up to t−1 of a site's share holders, without the
//     coordinator): they never see another site's masked input (only the
//     coordinator does) and hold fewer than t shares of its secrets: they
//     learn the published model, as every site does (with two sites, each
//     learns the other's update from the mean).
//   - Network attacker: the links are TLS 1.3 with client certificates; it
//     sees sizes and timing, cannot read or alter messages or pose as the
//     coordinator or a site. Shares are also encrypted end to end between
//     sites. Without TLS (--insecure-dev) it is a malicious coordinator,
//     and the keys are not authenticated: sites without a certificate sign
//     nothing and check nothing.
//
// mTLS authenticates each site to the coordinator, not to the other sites:
// the coordinator relays their messages, so only the sites' signatures keep
// it from substituting keys. Sites sign with their TLS certificate's key;
// every signed message starts with a "pfedmma/secagg/…" label, which TLS
// 1.3's signed content (64 spaces first) never does. Keys and seeds are
// fresh every round. Malicious sites poisoning the sum are out of scope
// (secure aggregation hides updates, it does not vet them: robust rules
// that need each update are refused with it).
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
// division). The sum is exact in Z_2^64 as long as every coordinate stays
// within int64: Σ_i w_i · M ≤ 2^63 − 1, where M = round(C · 2^s) is the
// largest quantised magnitude. Encode refuses a weight, and Decode a total
// weight, above ⌊(2^63 − 1) / M⌋ (2^31 − 1 at the defaults). Because the masked sum
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
