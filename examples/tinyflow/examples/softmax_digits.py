"""Softmax regression on scikit-learn's 8x8 digits: TensorFlow's MNIST tutorial, on TinyFlow.

The code is the tutorial's, line for line (placeholders, zero-initialised variables, softmax,
cross-entropy, gradient descent at 0.5, 1000 steps of 100 examples); only the data set is the
bundled 8x8 digits instead of a download.

    python examples/tinyflow/examples/softmax_digits.py [--target llvm]
"""

from __future__ import annotations

import argparse

import numpy as np

import tinyflow as tf


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="reference")
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)

    tf.reset_default_graph()
    data = tf.datasets.load_digits(flatten=True)
    x = tf.placeholder(tf.float32, [None, 64])
    W = tf.Variable(tf.zeros([64, 10]), name="W")
    b = tf.Variable(tf.zeros([10]), name="b")
    y = tf.nn.softmax(tf.matmul(x, W) + b)

    y_ = tf.placeholder(tf.float32, [None, 10])
    cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(y), reduction_indices=[1]))
    train_step = tf.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)

    sess = tf.Session(target=args.target)
    sess.run(tf.initialize_all_variables())
    rng = np.random.default_rng(0)
    for _ in range(args.steps):
        idx = rng.integers(0, len(data.train_images), 100)
        sess.run(train_step, feed_dict={x: data.train_images[idx],
                                        y_: tf.datasets.one_hot(data.train_labels[idx])})

    correct = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
    value = float(sess.run(accuracy, feed_dict={x: data.test_images,
                                                y_: tf.datasets.one_hot(data.test_labels)}))
    print(f"test accuracy: {value:.4f}")
    return value


if __name__ == "__main__":
    main()
