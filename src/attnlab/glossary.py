"""The course glossary: every term a lesson introduces, defined once, with the lesson that teaches it.

``attnlab.glossary("KV cache")`` (the module is callable; ``attnlab.glossary.lookup`` is the same)
gives the definition and the lesson that teaches it, as text or, in JupyterLab, as markdown. Each lesson opens with a "Words in this lesson" box: a markdown cell
of the instructor notebook whose metadata lists the terms (``{"attnlab": {"glossary": [...]}}``);
``python -m autograder release`` and ``build`` fill the box from this table, so a definition is
written in one place only. A test checks that every listed term is defined here and that every term
here is listed by some lesson.
"""

from __future__ import annotations

import difflib
import sys
import types
from dataclasses import dataclass

__all__ = ["TERMS", "Term", "box_markdown", "fill_boxes", "listed_terms", "lookup"]


@dataclass(frozen=True)
class Term:
    """A word of the course: its name, a one- or two-sentence definition, the lesson that teaches it."""

    name: str
    definition: str
    lesson: str  # two-digit lesson number

    def __str__(self) -> str:
        return f"{self.name} (lesson {self.lesson}): {self.definition}"

    def _repr_markdown_(self) -> str:
        return f"**{self.name}** *(lesson {self.lesson})*: {self.definition}"


# Lessons add their terms under their own heading; keep each definition to one or two plain
# sentences a newcomer can read without the lesson.
TERMS: tuple[Term, ...] = (
    # -- lesson 00 --
    Term("exercise module", "A module of the course's library, such as attnlab/attention.py, whose "
         "functions you write in a lesson; later lessons import them.", "00"),
    Term("visible check", "A cell right after an exercise that runs your function on cases a "
         "hard-coded answer cannot pass and says what is wrong when it fails.", "00"),
    Term("hidden test", "A test that grades your code when you submit a lesson in a class; it runs "
         "outside your notebook, on inputs you do not see.", "00"),
    Term("reference implementation", "The course's own solution of an exercise module; "
         "attnlab.use_reference borrows it when you skip a lesson.", "00"),
    # -- lesson 01 --
    Term("RNN", "A recurrent neural network: it reads a sequence one token at a time, updating a "
         "state vector from the previous state and the current token.", "01"),
    Term("GRU", "Gated recurrent unit (Cho et al., 2014): an RNN whose gates decide how much of "
         "its state to keep and how much to overwrite at each step.", "01"),
    Term("encoder-decoder", "A model in two parts: the encoder reads the source into vectors, the "
         "decoder writes the output from them, one token at a time.", "01"),
    Term("bidirectional encoder", "Two RNNs over the source, one reading left to right and one "
         "right to left; the state of position j joins both, so it sees the words on either side.", "01"),
    Term("fixed-length bottleneck", "In an encoder-decoder without attention, the whole source "
         "reaches the decoder through one vector whose size does not grow with the source.", "01"),
    Term("attention", "A way for one part of a model to read from many vectors at once: score "
         "each one, turn the scores into weights that sum to 1, and take the weighted average.", "01"),
    Term("additive attention", "Bahdanau's attention: the score of a key is tanh(q W_q + k W_k) v, "
         "a small neural network in which query and key meet by addition.", "01"),
    Term("context vector", "The weighted average of the encoder states that attention gives the "
         "decoder at one output step.", "01"),
    Term("alignment", "Which source positions each output step attends to; drawn as a heatmap "
         "with one row per output step and one column per source position.", "01"),
    Term("padding mask", "A boolean mask that is False at the padding added to make sequences of "
         "a batch equally long, so that attention gives those positions weight 0.", "01"),
    Term("cross-attention", "Attention whose queries come from one sequence and whose keys and "
         "values from another, such as a decoder reading the encoder's states.", "01"),
    Term("teacher forcing", "Training a decoder by feeding it the correct previous token at every "
         "step, instead of its own prediction.", "01"),
    Term("greedy decoding", "Writing the output by taking the most likely token at each step and "
         "feeding it back as the next step's input.", "01"),
    Term("exposure bias", "A model trained with teacher forcing never saw its own mistakes as "
         "input, so at use one wrong token can push the rest off course.", "01"),
    # -- lesson 02 --
    Term("query", "The vector a position uses to ask what it is looking for; it is scored "
         "against every key.", "02"),
    Term("key", "The vector a position offers to be matched against queries; a query's score for "
         "it is their dot product.", "02"),
    Term("value", "The vector a position contributes to the output of every query that attends "
         "to it, in proportion to the weight.", "02"),
    Term("softmax", "softmax(x)_j = exp(x_j) / Σ_i exp(x_i): turns any scores into positive "
         "weights that sum to 1, larger for larger scores.", "02"),
    Term("attention weights", "The softmax of one query's scores over the keys: how much of each "
         "value goes into that query's output. Each query's weights sum to 1.", "02"),
    Term("scaled dot-product attention", "softmax(Q Kᵀ / √d_k) V: the attention of transformers, "
         "scoring every query against every key with a dot product.", "02"),
    Term("softmax saturation", "When one score exceeds the others by a wide margin, the softmax "
         "gives it nearly all the weight and hardly changes when the scores change.", "02"),
    Term("self-attention", "Attention in which queries, keys and values all come from the same "
         "sequence, so every position can read every other.", "02"),
    Term("Jacobian", "The matrix of all partial derivatives of a function's outputs with respect "
         "to its inputs; backpropagation multiplies by it.", "02"),
    # -- lesson 03 --
    Term("attention mask", "A boolean matrix with a row per query and a column per key; True means the "
         "query may attend to the key, False that the key's score is set to −∞ and its weight is 0.", "03"),
    Term("causal mask", "The mask of a decoder: each position may attend to itself and to earlier "
         "positions only, never to a later one.", "03"),
    Term("bottom-right alignment", "With fewer queries than keys, a causal mask that treats the queries "
         "as the last positions of the sequence, so the last query sees every key (decoding with a "
         "cache needs it).", "03"),
    Term("fully masked row", "A query whose mask is False for every key: it has nothing to attend to, "
         "and a plain softmax over its scores of −∞ gives 0/0 = nan.", "03"),
    Term("sequence packing", "Laying several documents end to end in one training row instead of "
         "padding each to a common length, so that no compute is spent on padding.", "03"),
    Term("document mask", "A mask for packed sequences: a token may attend only to tokens of its own "
         "document.", "03"),
    Term("sliding-window attention", "Local attention: each query sees only the last few positions "
         "(the window), itself included, as in Mistral 7B and Gemma 2.", "03"),
    # -- lesson 04 --
    Term("attention head", "One of several attentions that run side by side in a layer, each with "
         "its own query, key and value projections onto a slice of the features, so each computes its "
         "own weights.", "04"),
    Term("multi-head attention", "H attention heads in parallel, each on d_model / H features; their "
         "outputs are put side by side and mixed by an output projection. It costs what one wide head "
         "costs.", "04"),
    Term("grouped-query attention", "GQA: the query heads are split into groups and each group shares "
         "one key head and one value head, which shrinks the KV cache (Qwen2.5-3B: 16 query heads, 2 "
         "key/value heads).", "04"),
    Term("multi-query attention", "Grouped-query attention with a single key head and a single value "
         "head shared by every query head.", "04"),
    Term("head pruning", "Removing attention heads from a trained model by multiplying their outputs by "
         "0; often many can go with little change in the loss.", "04"),
    Term("KV cache", "The keys and values of the tokens seen so far, kept per layer while a model "
         "generates, so each new token computes only its own and attends over the cache.", "04"),
    Term("prefix caching", "Reusing the KV cache of a shared beginning (a prompt) for several "
         "continuations instead of computing it again for each.", "04"),
    Term("previous-token head", "A head that puts most of its weight on the token just before the "
         "query; an induction head in a later layer reads what it writes (Olsson et al., 2022).", "04"),
    Term("induction head", "A head that, at a repeated token, attends to the token that followed its "
         "earlier occurrence, so the model can copy what came next before (Olsson et al., 2022).", "04"),
    # -- lesson 05 --
    Term("permutation equivariance", "A function is permutation-equivariant when reordering its "
         "inputs reorders its outputs the same way and changes nothing else; attention without "
         "positions is.", "05"),
    Term("positional encoding", "Information about where each token stands, given to a "
         "transformer so it can use word order; attention alone cannot see it.", "05"),
    Term("sinusoidal encoding", "The fixed positional encoding of the original transformer: "
         "sines and cosines of the position at geometrically spaced frequencies, added to the "
         "token embeddings once.", "05"),
    Term("RoPE", "Rotary position embedding (Su et al., 2021): in every attention layer, each pair "
         "of dimensions of a query or key is rotated by an angle proportional to its position, so "
         "scores depend on the distance between tokens.", "05"),
    Term("rotary base", "The constant that sets RoPE's slowest rotations: pair i turns by "
         "base^(-2i/h) radians per position. 10,000 in the RoFormer paper, 1,000,000 in "
         "Qwen2.5 (rope_theta).", "05"),
    Term("relative position", "The distance m - n between a query's position and a key's; with "
         "RoPE a score depends on positions only through it.", "05"),
    Term("learned position embedding", "A trained table with one vector per position, added to the "
         "token embeddings (BERT, GPT-2); it has no row for a position beyond its length.", "05"),
    Term("ALiBi", "Attention with linear biases (Press et al., 2022): each head adds minus a fixed "
         "slope times the query-key distance to its scores, instead of giving the tokens positions.",
         "05"),
    Term("length extrapolation", "Working on inputs longer than any seen in training; measured by "
         "training on short inputs and testing on long ones.", "05"),
    # -- lesson 06 --
    Term("feed-forward block", "The half of a transformer layer that transforms each token's vector on "
         "its own: two linear maps around a non-linearity (or three, with a gate).", "06"),
    Term("GELU", "Gaussian error linear unit, x·Φ(x) with Φ the standard normal distribution function: "
         "a smooth ReLU, used in GPT-2's and BERT's feed-forward blocks.", "06"),
    Term("SwiGLU", "A gated feed-forward block, down(silu(gate(x)) ⊙ up(x)), with silu(z) = z·sigmoid(z); "
         "used by LLaMA and Qwen2.5.", "06"),
    Term("neuron", "One of the d_ff hidden units of a feed-forward block: one row of its first matrix "
         "(a key) and one column of its last (a value).", "06"),
    Term("key-value memory", "Reading a feed-forward block as a memory (Geva et al., 2021): each neuron's "
         "key detects a pattern in the input, and its value is added to the output in proportion.", "06"),
    Term("residual connection", "Adding a sublayer's output to its input, x + f(x), so that the sublayer "
         "learns a change and the input passes through unchanged.", "06"),
    Term("residual stream", "The vector of each token that flows up through a transformer, to which every "
         "attention and feed-forward sublayer adds its output.", "06"),
    Term("layer normalization", "LayerNorm: subtract a vector's mean, divide by its standard deviation, "
         "then scale and shift each feature by learned weights.", "06"),
    Term("RMSNorm", "Root-mean-square normalization: divide a vector by the root mean square of its "
         "entries and scale each feature; unlike LayerNorm it keeps the mean.", "06"),
    Term("pre-norm", "Normalizing a sublayer's input, x + f(norm(x)), so that the residual stream itself "
         "is never normalized; used by GPT-2, LLaMA and Qwen2.5.", "06"),
    Term("post-norm", "Normalizing after the residual addition, norm(x + f(x)), as the 2017 transformer "
         "did; it usually needs a learning-rate warm-up to train.", "06"),
    Term("learning-rate warm-up", "Starting training with a small learning rate and raising it over the "
         "first steps, so that the first updates are small.", "06"),
    Term("direct logit attribution", "Reading what a vector written into the residual stream does to the "
         "output by passing it straight through the final norm and the output embedding: its direct "
         "effect, leaving out everything the later layers do with it.", "06"),
    Term("polysemantic neuron", "A neuron that fires on several unrelated patterns of the input, so that "
         "no single description fits its top contexts.", "06"),
    Term("superposition", "Storing more features than a layer has dimensions (or neurons), as directions "
         "that are not orthogonal; it works when the features are rarely active at once, and it makes "
         "neurons polysemantic.", "06"),
    # -- lesson 07 --
    Term("transformer block", "The unit transformers are stacked from: attention, then a feed-forward "
         "network, each with a residual connection and a normalization.", "07"),
    Term("encoder-only model", "A stack of blocks whose attention has no causal mask, so every token sees "
         "the whole text (BERT); it reads and classifies, but cannot write.", "07"),
    Term("decoder-only model", "A stack of blocks with a causal mask and a language-model head (GPT, most "
         "chat models): it predicts each next token from the tokens before it, so it can write.", "07"),
    Term("language-model head", "The last layer of a language model: it turns each final hidden vector "
         "into one score (logit) per word of the vocabulary for the next token.", "07"),
    Term("tied embeddings", "Using the embedding table also as the language-model head's weight, so a "
         "word's score is the dot product of the hidden vector with that word's embedding.", "07"),
    Term("state dict", "A model's parameters as a dictionary from names (such as "
         "blocks.0.self_attn.q_proj.weight) to tensors: what torch.save writes and load_state_dict "
         "reads back, by name.", "07"),
    Term("autoregressive generation", "Writing a sequence one token at a time, each new token predicted "
         "from all the tokens before it and then appended to them.", "07"),
    Term("temperature", "The number the logits are divided by before the softmax when sampling: below 1 "
         "sharpens the distribution toward the most likely token, above 1 flattens it.", "07"),
    Term("linear probe", "A simple linear classifier trained on a model's hidden vectors to test whether "
         "some information (here, the sense of a word) can be read off them.", "07"),
    Term("course model", "The small decoder-only transformer this course trains on its own corpus and "
         "ships (attnlab.zoo), so lessons can look inside a trained model.", "07"),
    Term("top-k sampling", "Sampling the next token from only the k most likely tokens, their "
         "probabilities renormalized to sum to 1.", "07"),
    Term("top-p sampling", "Nucleus sampling: sampling the next token from the fewest most likely tokens "
         "whose probabilities add up to at least p, so it keeps few tokens when the model is sure and many "
         "when it is not.", "07"),
    Term("masked language modelling", "BERT's pretraining objective: hide some of the input tokens "
         "(15%) behind a mask token and train an encoder to predict them from both sides.", "07"),
    Term("span corruption", "T5's pretraining objective: replace random spans of the input by sentinel "
         "tokens and train an encoder-decoder to write the missing spans.", "07"),
    Term("prefix language model", "A decoder whose mask lets the first part of the text (the prefix) "
         "attend both ways and the rest only to the past; the loss is on the rest.", "07"),
    Term("ablation", "Switching a part of a trained model off (here, one attention head) and measuring "
         "what it can still do, to test what that part is needed for.", "07"),
    # -- lesson 08 --
    Term("FLOP", "One floating-point operation, such as a multiplication or an addition; the course "
         "counts a multiply-add as two. FLOP/s (operations per second) is a rate.", "08"),
    Term("quadratic cost", "A cost that grows with the square of the input's length: every one of "
         "n queries scores every one of n keys, so doubling n quadruples the work.", "08"),
    Term("log-log plot", "A plot with logarithmic axes for both x and y; a power law y = c·n^p is "
         "a straight line on it, whose slope is the exponent p.", "08"),
    Term("crossover length", "The length at which attention's n² products cost as many FLOPs as "
         "the rest of a layer, whose cost grows only like n.", "08"),
    Term("6N rule", "Training a transformer with N parameters costs about 6N FLOPs per token: 2N in "
         "the forward pass and 4N in the backward pass, plus a part for attention that grows with the "
         "context (Kaplan et al., 2020).", "08"),
    Term("activation memory", "The intermediate results a forward pass keeps for the backward pass; it "
         "grows with batch size, length and depth, and with the square of the length when attention "
         "keeps its n × n weights.", "08"),
    Term("prefill and decode", "The two phases of generation: prefill reads the whole prompt at once "
         "(n queries against n keys, quadratic); each decode step adds one token, whose single query "
         "meets the n cached keys (linear in the context).", "08"),
    Term("memory-bound", "Limited by how fast data moves, not by arithmetic: a computation whose "
         "arithmetic intensity is below the machine's balance point, such as a decode step.", "08"),
    Term("patch", "A small square of an image, flattened into one vector: the token of a vision "
         "transformer (a 224 x 224 image makes 196 patches of 16 x 16 pixels).", "08"),
    Term("spectrogram frame", "The energies of a short slice of sound at many frequencies; an audio "
         "model reads sound as a sequence of such frames, one every 10 ms in Whisper.", "08"),
    Term("latent", "A compressed representation of an image made by an autoencoder; latent "
         "diffusion models denoise it instead of the pixels.", "08"),
    Term("context window", "The largest number of tokens a model can take in one input; what lies "
         "beyond it is not seen.", "08"),
    Term("linear attention", "A variant of attention whose similarity is a product of feature maps, "
         "so it can run as a recurrence with a fixed-size state: its cost grows linearly.", "08"),
    Term("inductive bias", "The assumptions built into a model before it sees data, such as a "
         "convolution's focus on neighbouring pixels; they let it learn from fewer examples.", "08"),
    # -- lesson 09 --
    Term("online softmax", "Softmax computed in one pass over a row read in blocks: a running "
         "maximum and a running sum of exponentials, the sum rescaled whenever the maximum grows.", "09"),
    Term("log-sum-exp", "log Σ_j exp(x_j) of a row of scores, computed stably as m + log ℓ from "
         "its maximum m and normaliser ℓ; any weight of the row is exp(x_j − log-sum-exp).", "09"),
    Term("tiling", "Splitting a computation on large matrices into small blocks (tiles) that fit "
         "in fast memory, and finishing the work on each block before moving on.", "09"),
    Term("FlashAttention", "Exact attention computed tile by tile with the online softmax, so that "
         "the n × n matrix of scores is never stored (Dao et al., 2022).", "09"),
    Term("arithmetic intensity", "The floating-point operations a computation does per byte it "
         "moves to or from main memory.", "09"),
    Term("balance point", "A machine's peak FLOP/s divided by its memory bandwidth: code whose "
         "arithmetic intensity is below it waits for memory, code above it waits for arithmetic.", "09"),
    Term("roofline model", "Attainable FLOP/s against arithmetic intensity: a slope set by memory "
         "bandwidth, then a flat roof at peak arithmetic, meeting at the balance point.", "09"),
    Term("page fault", "The first time a program touches a page (4 KiB) of freshly allocated "
         "memory, the operating system stops it to find, zero and map a physical page.", "09"),
    Term("memory allocator", "The library code (malloc) that hands a program memory and takes it "
         "back; glibc's gives large blocks fresh pages from the operating system and returns them "
         "when they are freed, so the next large block page-faults again.", "09"),
    Term("HBM and SRAM", "A GPU's two memories: HBM, large (tens of GB or more) and slower; SRAM on "
         "the chip, small (a few hundred KB per multiprocessor) and many times faster.", "09"),
    Term("recomputation", "Computing an intermediate result again in the backward pass instead of "
         "storing it in the forward pass: arithmetic traded for memory.", "09"),
    Term("fused kernel", "One GPU program that does several steps (here scores, softmax and "
         "weighted sum) without writing the results in between to main memory.", "09"),
    Term("Triton", "A language and compiler, written in Python, for GPU kernels that work on "
         "blocks; its interpreter runs the same kernels on a CPU, slowly, for testing.", "09"),
    Term("Triton program", "One running instance of a Triton kernel, working on one tile; a launch "
         "starts a grid of them, and each finds its tile with tl.program_id.", "09"),
    Term("split-KV decoding", "Attention of one new query split over chunks of the cached keys and "
         "values, computed in parallel and merged with their log-sum-exps (Flash-Decoding).", "09"),
)


def _key(name: str) -> str:
    return " ".join(name.lower().replace("-", " ").split())


def lookup(name: str) -> Term:
    """The term called ``name`` (case, hyphens and spacing ignored); a KeyError suggests near names."""
    wanted = _key(name)
    for term in TERMS:
        if _key(term.name) == wanted:
            return term
    close = difflib.get_close_matches(wanted, [_key(t.name) for t in TERMS], n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise KeyError(f"{name!r} is not in the course glossary{hint}")


def box_markdown(names: list[str], lesson: str) -> str:
    """The "Words in this lesson" box for ``names``: each term with its definition; a term taught
    in another lesson says where."""
    lines = ["**Words in this lesson**", ""]
    for name in names:
        term = lookup(name)
        where = "" if term.lesson == lesson else f" *(from lesson {term.lesson})*"
        lines.append(f"- **{term.name}**{where}: {term.definition}")
    return "\n".join(lines)


def listed_terms(notebook) -> list[str]:
    """The terms a notebook's "Words in this lesson" cells list (``nbformat`` notebook)."""
    names: list[str] = []
    for cell in notebook.cells:
        names += cell.metadata.get("attnlab", {}).get("glossary", [])
    return names


def fill_boxes(notebook, lesson: str) -> None:
    """Write the definitions into every "Words in this lesson" cell of ``notebook``, in place."""
    for cell in notebook.cells:
        names = cell.metadata.get("attnlab", {}).get("glossary")
        if names is not None:
            cell.source = box_markdown(list(names), lesson)


class _Glossary(types.ModuleType):
    """This module, callable: ``attnlab.glossary("softmax")``."""

    def __call__(self, name: str) -> Term:
        return lookup(name)


sys.modules[__name__].__class__ = _Glossary
