package tokenizer

// CommandHelp is the long help of `pfedmma tokenize`.
const CommandHelp = `Tokenize prints the CLIP token ids of each TEXT, as clip.tokenize does:
<|startoftext|>, the BPE ids, <|endoftext|>, zero padded to the context length.
The output is one line of JSON, {"tokens": [[ids...], ...]}, one list per TEXT.
A text that does not fit is an error unless --truncate is given.

--vocab is bpe_simple_vocab_16e6.txt.gz (or .txt), a Hugging Face vocab.json
(with merges.txt beside it), or a folder holding either.`
