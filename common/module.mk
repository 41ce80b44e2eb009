LIB_SRCS += common/error.c common/log.c
