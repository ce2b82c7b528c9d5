// cuDNN end to end (docs/cudnn.md): a program built with nvcc -cudart shared
// -lcudnn runs unchanged against rgpu's libcudnn.so.9 and a real
// rgpu-server, on the sim backend and on the CUDA backend (the fake driver
// and a fake cuDNN computing with the same executor, which refuses a
// convolution without the workspace it asked for); cudnn_check compares
// every result with one it computes in double precision.
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

void expectCudnnCheckPasses(const std::string& env) {
  RunResult r = run(testProgram("cudnn_check"), env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cudnn_check: done, 0 failed"), std::string::npos) << r.output;
  for (const char* ok :
       {"conv f32 NCHW 2x3x9x8 by 4x3x3x3, pad 1, forward", "conv f32 NCHW 2x3x9x8 by 4x3x3x3, pad 1, backward data",
        "conv f32 NCHW 2x3x9x8 by 4x3x3x3, pad 1, backward filter",
        "conv f32 NHWC, stride 2x3, dilation 2x1, alpha 2 beta 0.5, forward",
        "conv f64 NCHW, 2 groups, CUDNN_CONVOLUTION \\(flipped\\), backward filter", "conv f16 NHWC, forward",
        "conv bf16 NCHW, backward data", "conv 3-D f32 1x2x5x6x4 by 3x2x3x3x2, forward", "conv backward bias 3x5x4x6",
        "forward FindEx leaves y", "conv \\+ z \\+ bias, relu", "conv \\+ z \\(z = y\\) \\+ bias, identity", "cudnnAddTensor, a 1x4x1x1 bias over 2x4x3x5", "cudnnOpTensor MAX, beta 1",
        "cudnnTransformTensor NCHW to NHWC", "activation swish \\(beta 1.5\\), backward",
        "softmax log over channels, backward", "pooling max 3x3 pad 1 stride 2, NHWC, backward",
        "pooling average 3x3 pad 1 stride 2, padding not counted, backward", "batch norm spatial, running variance",
        "batch norm spatial, backward dx", "batch norm spatial, inference",
        "batch norm spatial, backward dx \\(the Ex form\\)", "cudnnNormalizationForwardTraining per channel, y",
        "cudnnNormalizationForwardTraining per channel, running variance",
        "cudnnNormalizationForwardTraining per channel, saved inverse deviation",
        "cudnnNormalizationForwardInference per channel", "cudnnNormalizationBackward per channel, dx",
        "cudnnNormalizationBackward per channel, dscale",
        "cudnnReduceTensor sum over N, H, W \\(beta 0.5\\)", "cudnnReduceTensor mean over H, W",
        "cudnnReduceTensor max over C, with indices", "cudnnReduceTensor norm2 of everything",
        "LRN across 5 channels, forward", "LRN across 5 channels, backward \\(against finite differences\\)"})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string(ok) + "[^\n]*: relative error [0-9.e+-]+ ok")))
        << ok << "\n" << r.output;
  for (const char* line :
       {"version: 91900", "algorithm counts: forward 8, backward data 6, backward filter 7",
        "forward FindEx: first timed and usable, sorted by time", "backward filter Find: first usable",
        "dropout 0.25: about a quarter of 10000 dropped", "dropout backward: the forward mask: ok",
        "dropout again: another mask: ok", "cudnnReduceTensor max indices: those of the maxima", "y of the wrong height: CUDNN_STATUS_BAD_PARAM",
        "relu on int32 tensors: CUDNN_STATUS_NOT_SUPPORTED", "a fused tanh: CUDNN_STATUS_NOT_SUPPORTED",
        "batch norm Ex with a fused ReLU: CUDNN_STATUS_NOT_SUPPORTED",
        "cudnnNormalization with a fused ReLU: CUDNN_STATUS_NOT_SUPPORTED",
        "cudnnNormalization in 2 groups: CUDNN_STATUS_NOT_SUPPORTED",
        "cudnnNormalization workspace 0, reserve space 0 bytes",
        "cudnnCreateCTCLossDescriptor: CUDNN_STATUS_NOT_SUPPORTED",
        "cudnnCreateCTCLossDescriptor is not supported by rgpu's cuDNN", "an LRN window of 17: CUDNN_STATUS_BAD_PARAM",
        "y is 2x4x10x8 but convolving x 2x3x9x8 by 4x3x3x3 gives 2x4x9x8",
        "y past the end of its allocation: CUDNN_STATUS_SUCCESS, then cudaErrorInvalidValue", "after it: cudaSuccess",
        "backend tensor dimensions read back: as set",
        "backend graph of matmul, pointwise mul: finalize CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
        "a graph of matmul, pointwise mul is refused with CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
}

TEST(Cudnn, ProgramsLoadRgpusCudnnNotNvidias) {
  RunResult r = run("ldd " + testProgram("cudnn_check"), std::string("LD_LIBRARY_PATH=") + RGPU_CLIENT_LIBDIR);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("libcudnn.so.9 => (\\S+)"))) << r.output;
  EXPECT_EQ(m[1].str().rfind(RGPU_CLIENT_LIBDIR, 0), 0u) << m[1].str();
}

TEST(Cudnn, LayersMatchTheirDefinitionsOnTheSim) {
  OwnServer own(false);
  expectCudnnCheckPasses(own.env());
}

// The CUDA backend: NVIDIA's cuDNN (here the fake), its descriptors made per
// call, the program's workspace, dropout states seeded once and restored.
TEST(CudnnCuda, LayersMatchTheirDefinitionsThroughTheCudaBackend) {
  OwnServer own(true);
  expectCudnnCheckPasses(own.env());
  const std::string log = own.driverLog();
  for (const char* line : {"cudnnConvolutionForward with a workspace", "cudnnConvolutionBackwardData with a workspace",
                           "cudnnConvolutionBackwardFilter with a workspace", "cudnnBatchNormalizationBackward",
                           "cudnnSetDropoutDescriptor (states seeded)", "cudnnDropoutForward (restored states)",
                           "cudnnPoolingBackward", "cudnnSoftmaxBackward", "cudnnReduceTensor with a workspace",
                           "cudnnLRNCrossChannelBackward"})
    EXPECT_NE(log.find(line), std::string::npos) << line << "\n" << log;
}

// examples/cnn_train: cuDNN's convolution, ReLU, pooling, dropout and
// softmax, cuRAND's initialisation and cuBLAS's classifier, forward and
// backward: its loss must fall and it must tell the test images apart.
void expectTheNetworkLearns(const std::string& env) {
  RunResult r = run(std::string(RGPU_EXAMPLES_DIR) + "/cnn_train 8", env);
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("cnn_train: loss ([0-9.]+) -> ([0-9.]+) over 8 epochs, test accuracy ([0-9.]+)%")))
      << r.output;
  const double first = std::stod(m[1]), last = std::stod(m[2]), accuracy = std::stod(m[3]);
  EXPECT_GT(first, 1.0) << r.output;  // (three classes: ln 3 = 1.10 before it learns)
  EXPECT_LT(last, 0.5 * first) << r.output;
  EXPECT_GT(accuracy, 85.0) << r.output;
}

TEST(Cudnn, AConvolutionalNetworkLearnsOnTheSim) {
  OwnServer own(false);
  expectTheNetworkLearns(own.env());
}

TEST(CudnnCuda, AConvolutionalNetworkLearnsThroughTheCudaBackend) {
  OwnServer own(true);
  expectTheNetworkLearns(own.env());
  EXPECT_NE(own.driverLog().find("cudnnConvolutionBackwardFilter with a workspace"), std::string::npos);
}

}  // namespace
}  // namespace rgpu::test
