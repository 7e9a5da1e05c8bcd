"""The short text episode 14 fine-tunes a language model on.

Written for the course (MIT, like the rest of it), so that it can ship with the package and
be used offline. It is small on purpose: a few hundred tokens that a model can learn to
predict better within a few dozen steps, which is enough to see a loss fall.
"""

TEXT = """\
A graphics processing unit was built to colour millions of pixels at once. Each pixel asks the same \
small question, so the chip was given thousands of simple cores that work in step, and memory that \
can feed them hundreds of gigabytes every second. Training a neural network asks the same kind of \
question many times over: multiply these numbers, add those, and do it again for the next batch.

A language model writes one token at a time. To write the next token it reads every one of its \
weights from memory, does a little arithmetic with each, and picks a word. The arithmetic is quick; \
the reading is slow. That is why a model that fits in memory can still be slow to talk, and why a \
smaller copy of the weights, in eight or four bits, makes it faster.

Before a long prompt is answered, the model reads the whole prompt at once. That part is fast per \
token, because the same weights serve every token of the prompt together. Then it keeps, for every \
layer, the keys and values of every token it has seen, so that it does not compute them again. This \
cache grows with every token and with every sequence in the batch, and on a long conversation it can \
grow larger than the weights themselves.

Fine-tuning a whole model needs room for its weights, its gradients and two running averages for \
the optimizer: four copies of everything. Low-rank adapters freeze the weights and learn two thin \
matrices beside some of them instead. Only the thin matrices get gradients and optimizer state, so \
the same graphics card can fine-tune a model several times larger.
"""
