"""LeNet-style CNN on scikit-learn's 8x8 digits with TinyFlow on NNVM (TinyFlow's mnist_lenet).

Layers are declared without weight shapes; ``tf.infer_variable_shapes`` derives them from the
input shape through NNVM's InferShape, and the weights are initialised by assign ops. Each
training step is one NNVM graph (forward, Gradient pass, Adam updates) compiled once by
``nnvm.compiler.build`` for ``--target`` with static memory planning.

    python examples/tinyflow/examples/lenet_digits.py --target reference
    python examples/tinyflow/examples/lenet_digits.py --target llvm --sublinear-memory

The last line printed is ``test accuracy: <float>``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tinyflow as tf


def lenet(x):
    """conv3x3(8)-relu-pool2 -> conv3x3(16)-relu-pool2 -> fc(64)-relu -> fc(10)."""
    net = tf.nn.conv2d(x, num_filter=8, ksize=[1, 3, 3, 1], padding="SAME", no_bias=False,
                       name="conv1")
    net = tf.nn.max_pool(tf.nn.relu(net), ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    net = tf.nn.conv2d(net, num_filter=16, ksize=[1, 3, 3, 1], padding="SAME", no_bias=False,
                       name="conv2")
    net = tf.nn.max_pool(tf.nn.relu(net), ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    net = tf.nn.relu(tf.nn.linear(tf.nn.flatten_layer(net), num_hidden=64, name="fc1"))
    return tf.nn.linear(net, num_hidden=10, name="fc2")


def initialize(sess, loss, x, batch_size):
    """He-normal weights, zero biases, with shapes from automatic shape inference."""
    init = []
    for var, name, shape in tf.infer_variable_shapes(loss, feed_dict={x: (batch_size, 1, 8, 8)}):
        if name.endswith("_bias"):
            init.append(tf.assign(var, tf.zeros(shape)))
        else:
            fan_in = int(np.prod(shape[1:]))
            init.append(tf.assign(var, tf.normal(shape, stdev=float(np.sqrt(2.0 / fan_in)))))
        print(f"shape[{name}] = {shape}")
    sess.run(init)


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="reference", help="NNVM target (reference, llvm)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.005, help="initial Adam learning rate")
    parser.add_argument("--decay", type=float, default=1.0, help="learning-rate decay per epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sublinear-memory", action="store_true",
                        help="differentiate with the Gradient pass's sublinear mirror policy")
    args = parser.parse_args(argv)

    tf.reset_default_graph()
    tf.set_random_seed(args.seed)
    data = tf.datasets.load_digits(seed=args.seed)
    x = tf.placeholder(tf.float32, name="x")
    label = tf.placeholder(tf.int64, name="label")
    logits = lenet(x)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits,
                                                                          labels=label))
    lr = tf.placeholder(tf.float32, name="learning_rate")  # fed per step: a decay schedule
    optimizer = tf.train.AdamOptimizer(lr, sublinear_memory=args.sublinear_memory)
    train_step = optimizer.minimize(loss)
    predict = tf.argmax(logits, 1)

    start = time.perf_counter()
    sess = tf.Session(target=args.target)
    initialize(sess, loss, x, args.batch_size)
    sess.run(tf.initialize_all_variables())  # Adam's moments and step counter

    batch = {x: data.train_images[:args.batch_size], label: data.train_labels[:args.batch_size],
             lr: np.array([args.lr])}
    stats = sess.stats([loss, train_step], batch)
    print(f"memory per training step: {stats['activation_bytes']} bytes planned vs "
          f"{stats['activation_bytes_naive']} bytes unplanned "
          f"({stats['activation_bytes_naive'] / max(stats['activation_bytes'], 1):.1f}x less; "
          f"target {stats['target']}, {stats['num_nodes']} nodes)")

    rng = np.random.default_rng(args.seed)
    n = len(data.train_images)
    steps = n // args.batch_size
    for epoch in range(args.epochs):
        order = rng.permutation(n)
        total = 0.0
        rate = np.array([args.lr * args.decay ** epoch])
        for i in range(steps):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            value, _ = sess.run([loss, train_step], feed_dict={
                x: data.train_images[idx], label: data.train_labels[idx], lr: rate})
            total += float(value)
        print(f"epoch {epoch + 1}: mean loss {total / steps:.4f} "
              f"({time.perf_counter() - start:.1f} s)")

    pred = sess.run(predict, feed_dict={x: data.test_images})
    accuracy = float(np.mean(pred == data.test_labels))
    print(f"wall time: {time.perf_counter() - start:.1f} s on target {args.target}")
    print(f"test accuracy: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
